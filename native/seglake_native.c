/* seglake_native: the optional compiled kernel of seglake's record codec (issue 14, P2).
 *
 * Plain C over raw buffers, no Python objects: seglake.record.native loads this file with
 * ctypes and keeps the numpy code as the fallback (and as the reference the tests compare
 * it with). Every function walks RecordBatch v2 records (layout in seglake.record.walk):
 *
 *   record = length:varint attributes:int8 timestampDelta:varlong offsetDelta:varint
 *            keyLength:varint key valueLength:varint value headerCount:varint
 *            [headerKeyLength:varint headerKey headerValueLength:varint headerValue]*
 *
 * Decode: sl_walk checks every record exactly as the numpy walk does and fills the
 * offsets, timestamps and Arrow offset/validity buffers; sl_gather copies keys, values and
 * headers into the Arrow data buffers. Any bytes sl_walk refuses return 1, and the caller
 * re-walks them with numpy, which names the problem.
 * Encode: sl_plan (batch boundaries, kafka-python's rule), sl_sizes (batch sizes for
 * given boundaries), sl_assemble (the records, after each batch's 61-byte header).
 * Decompress: sl_inflate (records blocks back to back: raw ones copied, Kafka's lz4
 * frames decoded by a bounds-checked LZ4 block decoder; any other block, and any frame it
 * does not take, is left to the caller's Python decompressor).
 * Read: sl_pread_ranges (many ranges of a local file, one pread each, into one buffer).
 * Hash: sl_xxh64 (XXH64, seed 0, of each value of an Arrow binary column: the key index's
 * hash, storage/key_index.py); sl_sort_pairs (the key index's hashes sorted, stable, with
 * their offsets) and sl_sbbf (its split-block bloom filter, storage/key_filter.py).
 */
#ifdef SEGLAKE_PYTHON_MODULE /* built by setup.py: also an (empty) importable module */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "seglake_native",
                                    "seglake's record codec kernel (used through ctypes)", -1,
                                    NULL, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_seglake_native(void) { return PyModule_Create(&module); }
#endif
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define ABI_VERSION 10
#define HEADER_SIZE 61
#define MIN_BODY 6
#define MIN_RECORD 7
#define VARINT 5
#define VARLONG 10
#define I32MAX 2147483647LL

typedef int64_t i64;
typedef uint64_t u64;
typedef uint8_t u8;
typedef int32_t i32;

i64 sl_abi_version(void) { return ABI_VERSION; }

/* Zig-zag varint at data[p], at most max bytes and ending before data[end]: its size
   (0: it does not end in time) and value. */
static inline int get_varint(const u8 *data, i64 p, i64 end, int max, i64 *out) {
    if (__builtin_expect(p < end && data[p] < 0x80, 1)) { /* one byte: -64..63 */
        *out = (i64)(data[p] >> 1) ^ -(i64)(data[p] & 1);
        return 1;
    }
    u64 z = 0;
    for (int k = 0; k < max; k++) {
        if (p + k >= end) return 0;
        u8 b = data[p + k];
        z |= (u64)(b & 0x7F) << (7 * k);
        if (b < 0x80) {
            *out = (i64)(z >> 1) ^ -(i64)(z & 1);
            return k + 1;
        }
    }
    return 0;
}

/* The same for bytes already checked. */
static inline i64 read_varint(const u8 *data, i64 *p) {
    u64 z = 0;
    int shift = 0;
    u8 b;
    do {
        b = data[(*p)++];
        z |= (u64)(b & 0x7F) << shift;
        shift += 7;
    } while (b >= 0x80);
    return (i64)(z >> 1) ^ -(i64)(z & 1);
}

static inline u64 zigzag(i64 v) { return ((u64)v << 1) ^ (u64)(v >> 63); }

static inline i64 vsize(u64 z) {
    i64 s = 1;
    while (z >= 0x80) {
        z >>= 7;
        s++;
    }
    return s;
}

static inline i64 put_varint(u8 *o, u64 z) {
    i64 k = 0;
    while (z >= 0x80) {
        o[k++] = (u8)(z | 0x80);
        z >>= 7;
    }
    o[k++] = (u8)z;
    return k;
}

#define SET_BIT(bits, i) ((bits)[(i) >> 3] |= (u8)(1u << ((i) & 7)))

/* ---- CRC-32C (Castagnoli), with SSE4.2's crc32 instruction on three independent streams
 * (Mark Adler's crc32c.c method: the streams' CRCs are combined by "zeros" operators).
 * sl_has_crc() is 0 where there is no such instruction, and the caller computes it. */
#define POLY 0x82f63b78u
#define CRC_SHORT 256
static uint32_t crc_zeros_short[4][256];
static int crc_hw = 0;

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* crc_zeros_short: the operator appending CRC_SHORT zero bytes to a CRC, byte by byte */
static void crc_init_tables(void) {
    uint32_t odd[32], even[32], row = 1;
    size_t len = CRC_SHORT;
    odd[0] = POLY; /* one zero bit */
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four */
    for (;;) {             /* one zero byte in even, then doubling until len is used up */
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0) break;
        gf2_square(odd, even);
        len >>= 1;
        if (len == 0) {
            memcpy(even, odd, sizeof even);
            break;
        }
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++) crc_zeros_short[k][n] = gf2_times(even, n << (8 * k));
}

static inline uint32_t crc_shift(uint32_t crc) {
    return crc_zeros_short[0][crc & 0xff] ^ crc_zeros_short[1][(crc >> 8) & 0xff] ^
           crc_zeros_short[2][(crc >> 16) & 0xff] ^ crc_zeros_short[3][crc >> 24];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
__attribute__((constructor)) static void crc_init(void) {
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
    crc_init_tables();
}

__attribute__((target("sse4.2"))) static uint32_t crc32c(const u8 *next, size_t len) {
    u64 crc0 = 0xffffffffu, crc1, crc2;
    while (len && ((uintptr_t)next & 7)) {
        crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
        len--;
    }
    while (len >= 3 * CRC_SHORT) {
        crc1 = crc2 = 0;
        const u8 *stop = next + CRC_SHORT;
        do {
            u64 a, b, c;
            memcpy(&a, next, 8);
            memcpy(&b, next + CRC_SHORT, 8);
            memcpy(&c, next + 2 * CRC_SHORT, 8);
            crc0 = _mm_crc32_u64(crc0, a);
            crc1 = _mm_crc32_u64(crc1, b);
            crc2 = _mm_crc32_u64(crc2, c);
            next += 8;
        } while (next < stop);
        crc0 = crc_shift((uint32_t)crc0) ^ crc1;
        crc0 = crc_shift((uint32_t)crc0) ^ crc2;
        next += 2 * CRC_SHORT;
        len -= 3 * CRC_SHORT;
    }
    while (len >= 8) {
        u64 a;
        memcpy(&a, next, 8);
        crc0 = _mm_crc32_u64(crc0, a);
        next += 8;
        len -= 8;
    }
    while (len--) crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
    return (uint32_t)crc0 ^ 0xffffffffu;
}
#else
static uint32_t crc32c(const u8 *next, size_t len) { (void)next; (void)len; return 0; }
#endif

i64 sl_has_crc(void) { return crc_hw; }

/* CRC-32C of data[0:len) (only where sl_has_crc()). */
i64 sl_crc32c(const u8 *data, i64 len) { return crc32c(data, (size_t)len); }

/* CRC-32C of each range data[start[i]:end[i]) into out[i], in one call (only where
 * sl_has_crc(); the caller keeps every range inside data). */
void sl_crc_ranges(const u8 *data, i64 n, const i64 *start, const i64 *end, uint32_t *out) {
    for (i64 i = 0; i < n; i++) out[i] = crc32c(data + start[i], (size_t)(end[i] - start[i]));
}

/* Read each range [start[i], start[i] + len[i]) of the open file fd into out, back to
 * back (pread, reading on after a short read until the file ends); got[i]: the bytes
 * read. Returns 0, or the errno of a failed read (got of that range and later ones unset). */
i64 sl_pread_ranges(i64 fd, i64 n, const i64 *start, const i64 *len, u8 *out, i64 *got) {
    for (i64 i = 0, at = 0; i < n; at += len[i], i++) {
        i64 k = 0;
        while (k < len[i]) {
            ssize_t r = pread((int)fd, out + at + k, (size_t)(len[i] - k), (off_t)(start[i] + k));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return errno;
            if (r == 0) break;
            k += r;
        }
        got[i] = k;
    }
    return 0;
}

static inline void put_be32(u8 *o, uint32_t v) {
    o[0] = (u8)(v >> 24);
    o[1] = (u8)(v >> 16);
    o[2] = (u8)(v >> 8);
    o[3] = (u8)v;
}

static inline i64 get_be(const u8 *p, int bytes) {
    u64 v = 0;
    for (int k = 0; k < bytes; k++) v = (v << 8) | p[k];
    int shift = 64 - 8 * bytes;
    return shift ? (i64)(v << shift) >> shift : (i64)v;
}

/* Batch headers of buf[pos:end) (layout in seglake.record.batch), as the Python scan reads
 * them, while each is plainly valid: a whole header and batch, batchLength >= 49, magic 2,
 * counts >= 0, base offset above the last offset before it (prev_last, or none if
 * has_prev is 0), and with verify_crc a matching CRC-32C. Stops before the first other
 * batch (the caller looks at it), after max_batches, or after the first batch whose last
 * offset is >= stop_after (if has_stop). rows: 14 int64 per batch, the 13 header fields
 * and the position. state: [position reached, 1 if stopped by stop_after]. Returns the
 * number of batches. */
i64 sl_scan(const u8 *buf, i64 pos, i64 end, i64 max_batches, i64 verify_crc, i64 has_prev,
            i64 prev_last, i64 has_stop, i64 stop_after, i64 *rows, i64 *state) {
    static const int width[13] = {8, 4, 4, 1, 4, 2, 4, 8, 8, 8, 2, 4, 4};
    i64 k = 0;
    state[1] = 0;
    if (verify_crc && !crc_hw) {
        state[0] = pos;
        return 0;
    }
    while (pos < end && k < max_batches && end - pos >= HEADER_SIZE) {
        const u8 *h = buf + pos;
        i64 *row = rows + 14 * k;
        int at = 0;
        for (int f = 0; f < 13; f++) {
            row[f] = get_be(h + at, width[f]);
            at += width[f];
        }
        row[4] &= 0xffffffffLL; /* crc: unsigned */
        i64 size = row[1] + 12, last = row[0] + row[6];
        if (row[1] < HEADER_SIZE - 12 || size > end - pos || row[3] != 2 || row[12] < 0 ||
            row[6] < 0 || (has_prev && row[0] <= prev_last))
            break;
        if (verify_crc && crc32c(h + 21, (size_t)(size - 21)) != (uint32_t)row[4]) break;
        row[13] = pos;
        k++;
        has_prev = 1;
        prev_last = last;
        pos += size;
        if (has_stop && last >= stop_after) {
            state[1] = 1;
            break;
        }
    }
    state[0] = pos;
    return k;
}

/* A key's or value's length varint at data[*q] (-1 null) and its bytes, leaving room before
 * last for what follows; moves *q past them. 0 where it does not fit. */
static inline int length_field(const u8 *data, i64 *q, i64 last, i64 *len, i64 *at) {
    int s = get_varint(data, *q, last, VARINT, len);
    if (!s || (*q += s) >= last || *len < -1 || (*len > 0 && *len >= last - *q)) return 0;
    *at = *q;
    if (*len > 0) *q += *len;
    return 1;
}

/* One record of a records block, checked: where it ends, its deltas, key and value lengths
 * (-1 null), header count, header key and value bytes and null header values; where its
 * key's and value's bytes and its header count begin. */
typedef struct {
    i64 end, td, od, kl, vl, hc, hkb, hvb, hvn, kp, vp, hp;
} record_t;

/* The record at data[p] of a block ending at lim, checked as the numpy walk checks it (offset
 * delta in [0, last_delta] and above prev, the record's fields filling its length exactly).
 * 0 where it does not walk. */
static inline int check_record(const u8 *data, i64 p, i64 lim, i64 last_delta, i64 prev,
                               record_t *r) {
    i64 len;
    int s;
    if (p >= lim || !(s = get_varint(data, p, lim, VARINT, &len))) return 0;
    i64 q = p + s;
    if (len < MIN_BODY || len > lim - q) return 0;
    i64 last = q + len;
    q += 1; /* attributes */
    if (!(s = get_varint(data, q, last, VARLONG, &r->td)) || (q += s) >= last) return 0;
    if (!(s = get_varint(data, q, last, VARINT, &r->od)) || (q += s) >= last) return 0;
    if (r->od < 0 || r->od > last_delta || r->od <= prev) return 0;
    if (!length_field(data, &q, last, &r->kl, &r->kp) ||
        !length_field(data, &q, last, &r->vl, &r->vp))
        return 0;
    r->hp = q;
    if (!(s = get_varint(data, q, last, VARINT, &r->hc))) return 0;
    q += s;
    if (r->hc < 0 || r->hc > (last - q) / 2) return 0;
    r->hkb = r->hvb = r->hvn = 0;
    for (i64 h = 0; h < r->hc; h++) {
        i64 hk, hv;
        if (!(s = get_varint(data, q, last, VARINT, &hk))) return 0;
        q += s;
        if (hk < 0 || hk >= last - q) return 0;
        q += hk;
        r->hkb += hk;
        if (!(s = get_varint(data, q, last, VARINT, &hv))) return 0;
        q += s;
        if (hv < -1 || (hv > 0 && hv > last - q)) return 0;
        if (hv >= 0) {
            q += hv;
            r->hvb += hv;
        } else {
            r->hvn++;
        }
        if (h + 1 < r->hc && q >= last) return 0;
    }
    if (q != last) return 0;
    r->end = last;
    return 1;
}

static inline i64 record_timestamp(const record_t *r, i64 b, const i64 *base_ts,
                                   const i64 *max_ts, const u8 *log_append) {
    return log_append[b] ? max_ts[b] : (i64)((u64)base_ts[b] + (u64)r->td);
}

/* Walk and check the records of nb records blocks data[start[b]:end[b]] (count[b] records
 * each). Per record: offset (baseOffset + offsetDelta), timestamp (baseTimestamp + delta,
 * or maxTimestamp where log_append[b]), key/value Arrow offsets (n + 1, int32) and validity
 * bits (caller zeroes them), header list offsets (n + 1). totals: [key bytes, value bytes,
 * headers, header key bytes, header value bytes, null keys, null values, null header values].
 * rec_start, rec_end (both NULL, or n each): where each record's bytes (its length varint
 * first) begin and end in data.
 * Returns 0; 1: bytes that do not walk (or a count that is not the total); 2: a column
 * over int32 offsets. */
i64 sl_walk(const u8 *data, i64 nb, const i64 *start, const i64 *end, const i64 *count,
            const i64 *base_offset, const i64 *base_ts, const i64 *max_ts, const u8 *log_append,
            const i64 *last_delta, i64 n, i64 *offset, i64 *timestamp, i32 *key_off,
            u8 *key_valid, i32 *val_off, u8 *val_valid, i32 *hdr_off, i64 *totals,
            i64 *rec_start, i64 *rec_end) {
    i64 i = 0, kb = 0, vb = 0, nh = 0, hkb = 0, hvb = 0, kn = 0, vn = 0, hvn = 0;
    key_off[0] = val_off[0] = hdr_off[0] = 0;
    for (i64 b = 0; b < nb; b++) {
        i64 p = start[b], lim = end[b], cnt = count[b], prev = -1;
        if (cnt < 0 || cnt > (lim - p) / MIN_RECORD || i + cnt > n) return 1;
        if (cnt == 0 && lim > p) return 1;
        for (i64 k = 0; k < cnt; k++, i++) {
            record_t r;
            if (!check_record(data, p, lim, last_delta[b], prev, &r)) return 1;
            prev = r.od;
            if (r.kl >= 0) {
                kb += r.kl;
                SET_BIT(key_valid, i);
            } else {
                kn++;
            }
            if (r.vl >= 0) {
                vb += r.vl;
                SET_BIT(val_valid, i);
            } else {
                vn++;
            }
            hkb += r.hkb;
            hvb += r.hvb;
            hvn += r.hvn;
            nh += r.hc;
            offset[i] = base_offset[b] + r.od;
            timestamp[i] = record_timestamp(&r, b, base_ts, max_ts, log_append);
            if (kb > I32MAX || vb > I32MAX || nh > I32MAX) return 2;
            key_off[i + 1] = (i32)kb;
            val_off[i + 1] = (i32)vb;
            hdr_off[i + 1] = (i32)nh;
            if (rec_start) {
                rec_start[i] = p;
                rec_end[i] = r.end;
            }
            p = r.end;
        }
        if (p != lim) return 1;
    }
    if (i != n) return 1;
    if (hkb > I32MAX || hvb > I32MAX) return 2;
    totals[0] = kb;
    totals[1] = vb;
    totals[2] = nh;
    totals[3] = hkb;
    totals[4] = hvb;
    totals[5] = kn;
    totals[6] = vn;
    totals[7] = hvn;
    return 0;
}

static i64 lz4_frame(const u8 *src, i64 n, u8 *dst, i64 limit, i64 *room);

/* Batch b's records block ready to walk (*data, *lim): raw (codec 0) in place, or a Kafka
 * lz4 frame decoded into scratch, at most min(max_block, left) bytes. Returns the bytes it
 * decompressed (0 in place); -1 where it does not take the block (another codec, a frame
 * it refuses, a record count over rec_cap or that cannot fit the block); -2 where scratch
 * may be too small (*room: the room wanted). */
static inline i64 records_block(const u8 **data, i64 *lim, i64 codec, i64 cnt, i64 rec_cap,
                                u8 *scratch, i64 scratch_cap, i64 max_block, i64 left,
                                i64 *room) {
    i64 got = 0;
    if (codec == 3 && *lim > 0) {
        i64 limit = left < max_block ? left : max_block;
        *room = scratch_cap;
        got = lz4_frame(*data, *lim, scratch, limit < 0 ? 0 : limit, room);
        if (got < 0) return got;
        *data = scratch;
        *lim = got;
    } else if (codec != 0 && *lim > 0) {
        return -1;
    }
    if (cnt < 0 || cnt > rec_cap || cnt > *lim / MIN_RECORD || (cnt == 0 && *lim > 0)) return -1;
    return got;
}

/* Point reads' picks (the lookup), one pass a batch: batch b's records block (len[b] bytes at
 * address addr[b]: raw (codec 0) or a Kafka lz4 frame (codec 3), decoded into scratch, at
 * most min(max_block, what is left of the budget) bytes, which it then uses up) walked and
 * checked as sl_walk checks it; then queries q_first[b]..q_first[b + 1] each take the first
 * record with offset >= q_target (q_is_ts 0), or with timestamp >= q_target and offset >=
 * q_lo (q_is_ts 1): its bytes copied to out[used:], their start and end there, its offset
 * and timestamp (start -1: none in the block). Nothing is kept of the other records.
 * ok[b]: 0 where the block is of another codec, does not decode or walk, or holds more
 * than rec_cap records (its queries untouched: the caller walks the batches the usual way).
 * recs: room for rec_cap records (4 int64 each). state: [out used, budget left, room
 * wanted, 1: in scratch / 2: in out]. Returns the batch it stopped at (nb: all done): one
 * that wants more room (grow that buffer and call again from there). */
i64 sl_pick(i64 nb, const i64 *addr, const i64 *len, const i64 *codec, const i64 *count,
            const i64 *base_offset, const i64 *base_ts, const i64 *max_ts,
            const u8 *log_append, const i64 *last_delta, const i64 *q_first,
            const i64 *q_target, const i64 *q_lo, const u8 *q_is_ts, i64 b, u8 *scratch,
            i64 scratch_cap, i64 *recs, i64 rec_cap, u8 *out, i64 out_cap, i64 max_block,
            i64 *state, i64 *q_start, i64 *q_end, i64 *q_offset, i64 *q_ts, u8 *ok) {
    i64 used = state[0], left = state[1];
    state[2] = state[3] = 0;
    for (; b < nb; b++) {
        const u8 *data = (const u8 *)(uintptr_t)addr[b];
        i64 lim = len[b], cnt = count[b], prev = -1, p = 0, k, room = 0;
        ok[b] = 0;
        if (lim < 0) continue;
        i64 got = records_block(&data, &lim, codec[b], cnt, rec_cap, scratch, scratch_cap,
                                max_block, left, &room);
        if (got == -2) {
            state[2] = room;
            state[3] = 1;
            break;
        }
        if (got < 0) continue;
        for (k = 0; k < cnt; k++) {
            record_t r;
            if (!check_record(data, p, lim, last_delta[b], prev, &r)) break;
            prev = r.od;
            i64 *rec = recs + 4 * k;
            rec[0] = p;
            rec[1] = r.end;
            rec[2] = base_offset[b] + r.od;
            rec[3] = record_timestamp(&r, b, base_ts, max_ts, log_append);
            p = r.end;
        }
        if (k < cnt || p != lim) continue;
        i64 need = 0;
        for (i64 j = q_first[b]; j < q_first[b + 1]; j++) {
            i64 t = q_target[j];
            q_start[j] = -1;
            for (k = 0; k < cnt; k++) {
                const i64 *rec = recs + 4 * k;
                if (q_is_ts[j] ? rec[3] >= t && rec[2] >= q_lo[j] : rec[2] >= t) {
                    q_start[j] = k; /* for now: the record's index */
                    need += rec[1] - rec[0];
                    break;
                }
            }
        }
        if (need > out_cap - used) {
            state[2] = need;
            state[3] = 2;
            break;
        }
        for (i64 j = q_first[b]; j < q_first[b + 1]; j++) {
            if (q_start[j] < 0) continue;
            const i64 *rec = recs + 4 * q_start[j];
            memcpy(out + used, data + rec[0], (size_t)(rec[1] - rec[0]));
            q_start[j] = used;
            used += rec[1] - rec[0];
            q_end[j] = used;
            q_offset[j] = rec[2];
            q_ts[j] = rec[3];
        }
        left -= got;
        ok[b] = 1;
    }
    state[0] = used;
    state[1] = left;
    return b;
}

/* Copy the headers of a checked record (its header count varint at data[q]) into the
 * Arrow buffers: header keys' and values' offsets, data and value validity bits, after
 * *nh headers, *hkb key bytes and *hvb value bytes so far (all moved on); *nulls counts
 * null values. */
static inline void copy_headers(const u8 *data, i64 q, i64 *nh, i64 *hkb, i64 *hvb, i64 *nulls,
                                i32 *hk_off, u8 *hk_data, i32 *hv_off, u8 *hv_valid,
                                u8 *hv_data) {
    i64 hc = read_varint(data, &q), n = *nh, kw = *hkb, vw = *hvb;
    for (i64 h = 0; h < hc; h++, n++) {
        i64 hk = read_varint(data, &q);
        memcpy(hk_data + kw, data + q, (size_t)hk);
        kw += hk;
        q += hk;
        hk_off[n + 1] = (i32)kw;
        i64 hv = read_varint(data, &q);
        if (hv >= 0) {
            memcpy(hv_data + vw, data + q, (size_t)hv);
            vw += hv;
            q += hv;
            SET_BIT(hv_valid, n);
        } else {
            (*nulls)++;
        }
        hv_off[n + 1] = (i32)vw;
    }
    *nh = n;
    *hkb = kw;
    *hvb = vw;
}

/* Copy the keys, values and headers of records sl_walk accepted into the Arrow data
 * buffers; fills the header keys' and values' offsets (nh + 1) and value validity bits
 * (zeroed by the caller). hk_off NULL: the headers are not copied (none, or not wanted;
 * the other header buffers are then not touched either). */
void sl_gather(const u8 *data, i64 nb, const i64 *start, const i64 *end, u8 *key_data,
               u8 *val_data, i32 *hk_off, u8 *hk_data, i32 *hv_off, u8 *hv_valid,
               u8 *hv_data) {
    i64 kw = 0, vw = 0, hw = 0, hkw = 0, hvw = 0;
    if (hk_off) hk_off[0] = hv_off[0] = 0;
    for (i64 b = 0; b < nb; b++) {
        i64 p = start[b], lim = end[b];
        while (p < lim) {
            i64 len = read_varint(data, &p);
            i64 last = p + len, q = p + 1;
            while (data[q++] >= 0x80) { /* timestampDelta */
            }
            while (data[q++] >= 0x80) { /* offsetDelta */
            }
            i64 kl = read_varint(data, &q);
            if (kl > 0) {
                memcpy(key_data + kw, data + q, (size_t)kl);
                kw += kl;
                q += kl;
            }
            i64 vl = read_varint(data, &q);
            if (vl > 0) {
                memcpy(val_data + vw, data + q, (size_t)vl);
                vw += vl;
                q += vl;
            }
            if (hk_off && q < last) {
                i64 nulls = 0;
                copy_headers(data, q, &hw, &hkw, &hvw, &nulls, hk_off, hk_data, hv_off, hv_valid,
                             hv_data);
            }
            p = last;
        }
    }
}

/* Each record's size without its length, timestampDelta and offsetDelta varints:
 * attributes, key and value with their lengths (-1: null), headers (hbytes: count varint
 * and headers, or NULL for none: a 0 count). */
void sl_extra(i64 n, const i64 *klen, const i64 *vlen, const i64 *hbytes, i64 *out) {
    for (i64 i = 0; i < n; i++) {
        i64 kl = klen[i], vl = vlen[i];
        out[i] = 1 + vsize(zigzag(kl)) + (kl > 0 ? kl : 0) + vsize(zigzag(vl)) +
                 (vl > 0 ? vl : 0) + (hbytes ? hbytes[i] : 1);
    }
}

/* Encoded size of record i (length varint included) in a batch based at (bo, bt): extra[i]
 * is its size without the length, timestampDelta and offsetDelta varints. */
static inline i64 record_size(i64 i, const i64 *extra, const i64 *off, const i64 *ts, i64 bo,
                              i64 bt) {
    i64 body = extra[i] + vsize(zigzag(off[i] - bo)) + vsize(zigzag((i64)((u64)ts[i] - (u64)bt)));
    return body + vsize(zigzag(body));
}

/* kafka-python's batch rule over records of sizes extra[i] + their deltas' varints: a batch
 * takes the next record unless it is not empty and 61 + its records + that one would pass
 * batch_size, it holds max_records (0: no limit), or the offset delta would pass int32.
 * Writes each batch's first record and whole size; returns the number of batches. */
i64 sl_plan(i64 n, const i64 *extra, const i64 *off, const i64 *ts, i64 batch_size,
            i64 max_records, i64 *starts, i64 *sizes) {
    i64 budget = batch_size - HEADER_SIZE, nb = 0, s = 0, acc = 0;
    for (i64 i = 0; i < n; i++) {
        i64 size = record_size(i, extra, off, ts, off[s], ts[s]);
        if (i > s && (acc + size > budget || (max_records && i - s >= max_records) ||
                      off[i] - off[s] > I32MAX)) {
            starts[nb] = s;
            sizes[nb++] = acc + HEADER_SIZE;
            s = i;
            acc = 0;
            size = record_size(i, extra, off, ts, off[s], ts[s]);
        }
        acc += size;
    }
    starts[nb] = s;
    sizes[nb++] = acc + HEADER_SIZE;
    return nb;
}

/* Whole size of each batch (header included) for given boundaries and bases. */
void sl_sizes(i64 n, i64 nb, const i64 *starts, const i64 *base_off, const i64 *base_ts,
              const i64 *extra, const i64 *off, const i64 *ts, i64 *sizes) {
    for (i64 b = 0; b < nb; b++) {
        i64 e = b + 1 < nb ? starts[b + 1] : n, acc = HEADER_SIZE;
        for (i64 i = starts[b]; i < e; i++) acc += record_size(i, extra, off, ts, base_off[b], base_ts[b]);
        sizes[b] = acc;
    }
}

static inline i64 offset_at(const void *offsets, int wide, i64 i) {
    return wide ? ((const i64 *)offsets)[i] : (i64)((const i32 *)offsets)[i];
}

/* Write the batches: batch b's 61-byte header (hdr + 61 * b) then its records. Keys and
 * values: lengths (-1 null) and Arrow offsets (int32, or int64 where *_wide) into their
 * data; headers: count per record and each record's encoded headers (Arrow offsets into
 * hdata), or hcount NULL for none. With crc (only where sl_has_crc()), also writes each
 * batch's CRC-32C. Returns the bytes written. */
i64 sl_assemble(i64 n, i64 nb, const i64 *starts, const i64 *base_off, const i64 *base_ts,
                const u8 *hdr, const i64 *off, const i64 *ts, const i64 *extra,
                const i64 *klen, const void *koff, int k_wide, const u8 *kdata,
                const i64 *vlen, const void *voff, int v_wide, const u8 *vdata,
                const i64 *hcount, const void *hoff, int h_wide, const u8 *hdata, i64 crc,
                u8 *out) {
    i64 w = 0;
    for (i64 b = 0; b < nb; b++) {
        i64 e = b + 1 < nb ? starts[b + 1] : n, bo = base_off[b], bt = base_ts[b], w0 = w;
        memcpy(out + w, hdr + HEADER_SIZE * b, HEADER_SIZE);
        w += HEADER_SIZE;
        for (i64 i = starts[b]; i < e; i++) {
            u64 zo = zigzag(off[i] - bo), zt = zigzag((i64)((u64)ts[i] - (u64)bt));
            i64 body = extra[i] + vsize(zo) + vsize(zt);
            w += put_varint(out + w, zigzag(body));
            out[w++] = 0;
            w += put_varint(out + w, zt);
            w += put_varint(out + w, zo);
            i64 kl = klen[i], vl = vlen[i];
            w += put_varint(out + w, zigzag(kl));
            if (kl > 0) {
                memcpy(out + w, kdata + offset_at(koff, k_wide, i), (size_t)kl);
                w += kl;
            }
            w += put_varint(out + w, zigzag(vl));
            if (vl > 0) {
                memcpy(out + w, vdata + offset_at(voff, v_wide, i), (size_t)vl);
                w += vl;
            }
            if (hcount) {
                w += put_varint(out + w, zigzag(hcount[i]));
                i64 h0 = offset_at(hoff, h_wide, i), h1 = offset_at(hoff, h_wide, i + 1);
                memcpy(out + w, hdata + h0, (size_t)(h1 - h0));
                w += h1 - h0;
            } else {
                out[w++] = 0;
            }
        }
        if (crc) put_be32(out + w0 + 17, crc32c(out + w0 + 21, (size_t)(w - w0 - 21)));
    }
    return w;
}

/* ---- LZ4 (frame format of Kafka's lz4 records blocks; block format) -------------------
 * Only what every conforming LZ4 compressor writes is taken; the rest returns -1 and the
 * caller decompresses it the usual way (whose errors name the problem). Every read of src
 * is checked against its length and every write of dst against its capacity, whatever the
 * bytes say. */
#define LZ4_MIN_MATCH 4
#define LZ4_LAST_LITERALS 5 /* the last 5 bytes of a block are literals */
#define LZ4_MFLIMIT 12      /* the last match starts 12 bytes or more before the end */

/* A length's 255-continued extension at src[*ip]: adds to *len; 0 if it runs off src. */
static inline int lz4_length(const u8 *src, i64 n, i64 *ip, i64 *len) {
    u8 b;
    do {
        if (*ip >= n) return 0;
        b = src[(*ip)++];
        *len += b;
    } while (b == 255);
    return 1;
}

/* The LZ4 block src[0:n) into dst[0:cap): bytes written, or -1 where it does not decode
 * within cap or breaks the block format's end rules (last sequence literals only, at
 * least LZ4_LAST_LITERALS of them after the last match, which starts LZ4_MFLIMIT or more
 * bytes before the end). What this accepts, the reference decoder (LZ4_decompress_safe,
 * any capacity >= the output) accepts, with the same output. */
static i64 lz4_block(const u8 *src, i64 n, u8 *dst, i64 cap) {
    i64 ip = 0, op = 0, match_start = -1, match_end = 0;
    for (;;) {
        if (ip >= n) return -1;
        u8 token = src[ip++];
        i64 lit = token >> 4;
        if (lit == 15 && !lz4_length(src, n, &ip, &lit)) return -1;
        if (lit > n - ip || lit > cap - op) return -1;
        if (lit <= 16 && n - ip >= 16 && cap - op >= 16) {
            memcpy(dst + op, src + ip, 16); /* whole: the bytes past lit are free room */
        } else {
            memcpy(dst + op, src + ip, (size_t)lit);
        }
        ip += lit;
        op += lit;
        if (ip == n) break; /* the last sequence: literals only */
        if (n - ip < 2) return -1;
        i64 off = (i64)src[ip] | ((i64)src[ip + 1] << 8);
        ip += 2;
        if (off == 0 || off > op) return -1;
        i64 len = token & 15;
        if (len == 15 && !lz4_length(src, n, &ip, &len)) return -1;
        len += LZ4_MIN_MATCH;
        if (len > cap - op) return -1;
        u8 *d = dst + op;
        const u8 *m = d - off;
        if (off >= 16 && cap - op >= len + 15) { /* 16-byte steps, each after its source */
            for (i64 k = 0; k < len; k += 16) memcpy(d + k, m + k, 16);
        } else if (off >= 8 && cap - op >= len + 7) {
            for (i64 k = 0; k < len; k += 8) memcpy(d + k, m + k, 8);
        } else if (off >= len) {
            memcpy(d, m, (size_t)len);
        } else { /* a short repeated pattern, byte by byte */
            for (i64 k = 0; k < len; k++) d[k] = m[k];
        }
        match_start = op;
        op += len;
        match_end = op;
    }
    if (match_start >= 0 && (op - match_end < LZ4_LAST_LITERALS || op - match_start < LZ4_MFLIMIT))
        return -1;
    return op;
}

static inline i64 get_le32(const u8 *p) {
    return (i64)p[0] | ((i64)p[1] << 8) | ((i64)p[2] << 16) | ((i64)p[3] << 24);
}

/* The LZ4 frame src[0:n) (magic, FLG version 01 without dictionary or reserved bits, BD
 * block maximum 64 KiB - 4 MiB, blocks independent or a single one, each within the
 * block maximum; xxHash32 checksums not checked: the batch's CRC-32C covers them) into
 * dst. *room: at most that many bytes (in: the caller's bound; out, where 0 is returned
 * because the frame's blocks may need more: the room they may need). Returns bytes
 * written, -1 (not taken), or -2 (more room needed: *room). */
static i64 lz4_frame(const u8 *src, i64 n, u8 *dst, i64 limit, i64 *room) {
    static const i64 block_max_of[8] = {0, 0, 0, 0, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
    if (n < 7 || src[0] != 0x04 || src[1] != 0x22 || src[2] != 0x4d || src[3] != 0x18) return -1;
    u8 flg = src[4];
    i64 block_max = block_max_of[(src[5] >> 4) & 7];
    if ((flg >> 6) != 1 || (flg & 3) || !block_max) return -1;
    int linked = !(flg & 0x20);
    i64 block_sum = (flg & 0x10) ? 4 : 0, pos = 7 + ((flg & 0x08) ? 8 : 0), need = 0, blocks = 0;
    for (;;) { /* the blocks' sizes first: the room they may need */
        if (pos > n - 4) return -1;
        i64 size = get_le32(src + pos);
        pos += 4;
        if (!size) break;
        int stored = (int)(size >> 31);
        size &= 0x7fffffff;
        if (size > block_max || size + block_sum > n - pos || (linked && blocks)) return -1;
        need += stored ? size : block_max;
        blocks++;
        pos += size + block_sum;
    }
    if (pos + ((flg & 0x04) ? 4 : 0) != n) return -1;
    if (need > limit) need = limit;
    if (need > *room) {
        *room = need;
        return -2;
    }
    i64 total = 0;
    pos = 7 + ((flg & 0x08) ? 8 : 0);
    for (i64 k = 0; k < blocks; k++) {
        i64 size = get_le32(src + pos);
        pos += 4;
        int stored = (int)(size >> 31);
        size &= 0x7fffffff;
        i64 cap = need - total < block_max ? need - total : block_max, got;
        if (stored) {
            if (size > cap) return -1;
            memcpy(dst + total, src + pos, (size_t)size);
            got = size;
        } else if ((got = lz4_block(src + pos, size, dst + total, cap)) < 0) {
            return -1;
        }
        total += got;
        pos += size + block_sum;
    }
    return total;
}

/* Records blocks i.. of nb (block b: len[b] bytes at address addr[b], compression codec[b])
 * appended to out[used:cap), in order: raw blocks (codec 0, or no bytes) copied, lz4 ones
 * decoded (each at most min(max_block, what is left of the budget) bytes, which it then
 * uses up). state: [used, budget left, room wanted]. sizes[b]: bytes appended. Returns the
 * block it stopped at (nb: all done): one it does not take (room wanted 0: the caller
 * decompresses it), or one that may need more room than is left (room wanted: grow the
 * buffer and call again from there). */
i64 sl_inflate(i64 nb, const i64 *addr, const i64 *len, const i64 *codec, i64 i, u8 *out,
               i64 cap, i64 max_block, i64 *state, i64 *sizes) {
    i64 used = state[0], left = state[1];
    state[2] = 0;
    for (; i < nb; i++) {
        const u8 *src = (const u8 *)(uintptr_t)addr[i];
        i64 n = len[i], got;
        if (n < 0) break;
        if (codec[i] == 0 || n == 0) {
            if (n > cap - used) {
                state[2] = n;
                break;
            }
            if (n) memcpy(out + used, src, (size_t)n);
            got = n;
        } else {
            if (codec[i] != 3) break;
            i64 limit = left < max_block ? left : max_block, room = cap - used;
            if (limit < 0) limit = 0;
            got = lz4_frame(src, n, out + used, limit, &room);
            if (got == -2) {
                state[2] = room;
                break;
            }
            if (got < 0) break;
            left -= got;
        }
        sizes[i] = got;
        used += got;
    }
    state[0] = used;
    state[1] = left;
    return i;
}

/* The Arrow buffers of one chunk of decoded records (sl_decode's out) and how much of each
 * is used: rows, key bytes, value bytes, headers, header key bytes, header value bytes;
 * null keys, values and header values. */
typedef struct {
    i64 *offset, *timestamp, *pid;
    i32 *tstype, *key_off, *val_off, *hdr_off, *hk_off, *hv_off;
    u8 *key_valid, *key_data, *val_valid, *val_data, *hk_data, *hv_valid, *hv_data, *tx;
    i64 used[6], kn, vn, hvn;
} chunk_t;

/* Append a record sl_walk's checks accepted (at data[r->...]) of batch b to the chunk. */
static inline void put_record(chunk_t *c, const record_t *r, const u8 *data, i64 b,
                              const i64 *base_offset, const i64 *base_ts, const i64 *max_ts,
                              const u8 *log_append, const i64 *pid, const u8 *tx, int headers) {
    i64 n = c->used[0];
    c->offset[n] = base_offset[b] + r->od;
    c->timestamp[n] = record_timestamp(r, b, base_ts, max_ts, log_append);
    c->tstype[n] = log_append[b];
    c->pid[n] = pid[b];
    c->tx[n] = tx[b];
    if (r->kl >= 0) {
        memcpy(c->key_data + c->used[1], data + r->kp, (size_t)r->kl);
        c->used[1] += r->kl;
        SET_BIT(c->key_valid, n);
    } else {
        c->kn++;
    }
    if (r->vl >= 0) {
        memcpy(c->val_data + c->used[2], data + r->vp, (size_t)r->vl);
        c->used[2] += r->vl;
        SET_BIT(c->val_valid, n);
    } else {
        c->vn++;
    }
    c->key_off[n + 1] = (i32)c->used[1];
    c->val_off[n + 1] = (i32)c->used[2];
    if (headers)
        copy_headers(data, r->hp, &c->used[3], &c->used[4], &c->used[5], &c->hvn, c->hk_off,
                     c->hk_data, c->hv_off, c->hv_valid, c->hv_data);
    c->hdr_off[n + 1] = (i32)c->used[3];
    c->used[0] = n + 1;
}

/* Batches decoded straight into one chunk of Arrow buffers, one pass a batch (what
 * sl_inflate, sl_walk and sl_gather do in three passes over all batches): batch b's
 * records block (len[b] bytes at address addr[b]: raw (codec 0) or a Kafka lz4 frame
 * (codec 3) decoded into scratch, at most min(max_block, what is left of the budget)
 * bytes, which it then uses up) walked and checked as sl_walk checks it, its records
 * appended to the chunk as they are checked when the chunk has room for the whole block
 * (else checked first, then appended if they fit):
 *   in  (addresses): addr, len, codec, count, base offset, base timestamp, max timestamp,
 *       log append (u8), last offset delta, producer id, transactional (u8): per batch
 *   out (addresses): offset, timestamp, timestamp type (i32), key offsets (i32, n + 1),
 *       key validity bits, key data, value offsets, value bits, value data, header list
 *       offsets (n + 1), header key offsets (nh + 1), header key data, header value
 *       offsets, header value bits, header value data, producer id, transactional (u8);
 *       validity bits zeroed by the caller; header buffers untouched unless headers
 *   cap: rows, key bytes, value bytes, headers, header key bytes, header value bytes
 *   state: [0..5] used of each cap, [6..8] null keys, values, header values, [9] budget
 *       left, [10] why it stopped, [11..16] what the batch it stopped at needs of each
 *       cap, [17] scratch room wanted.
 * Stops (returns the batch) at the end (why 0), at a batch the chunk has no room left for
 * (1: call again with a new chunk; one at least as large as its needs if it was empty),
 * at a frame that may need more scratch (2: room wanted), or at one it does not take (3:
 * another codec, a frame or records it refuses, more than rec_cap records: the caller
 * decodes the usual way, which names the problem; what the chunk holds is then void).
 * recs: room for rec_cap records. */
i64 sl_decode(i64 nb, const i64 *in, i64 b, const i64 *out, const i64 *cap, i64 *state,
              u8 *scratch, i64 scratch_cap, record_t *recs, i64 rec_cap, i64 max_block,
              i64 headers) {
    const i64 *addr = (const i64 *)in[0], *len = (const i64 *)in[1], *codec = (const i64 *)in[2],
              *count = (const i64 *)in[3], *base_offset = (const i64 *)in[4],
              *base_ts = (const i64 *)in[5], *max_ts = (const i64 *)in[6],
              *last_delta = (const i64 *)in[8], *pid = (const i64 *)in[9];
    const u8 *log_append = (const u8 *)in[7], *tx = (const u8 *)in[10];
    chunk_t c = {(i64 *)out[0],  (i64 *)out[1],  (i64 *)out[15], (i32 *)out[2], (i32 *)out[3],
                 (i32 *)out[6],  (i32 *)out[9],  (i32 *)out[10], (i32 *)out[12], (u8 *)out[4],
                 (u8 *)out[5],   (u8 *)out[7],   (u8 *)out[8],   (u8 *)out[11], (u8 *)out[13],
                 (u8 *)out[14],  (u8 *)out[16],  {state[0], state[1], state[2], state[3],
                                                   state[4], state[5]},
                 state[6],       state[7],       state[8]};
    i64 left = state[9];
    if (c.used[0] == 0) {
        c.key_off[0] = c.val_off[0] = c.hdr_off[0] = 0;
        if (headers) c.hk_off[0] = c.hv_off[0] = 0;
    }
    state[10] = 0;
    for (; b < nb; b++) {
        const u8 *data = (const u8 *)(uintptr_t)addr[b];
        i64 lim = len[b], cnt = count[b], prev = -1, p = 0, k, room = 0;
        if (lim < 0) break;
        i64 got = records_block(&data, &lim, codec[b], cnt, rec_cap, scratch, scratch_cap,
                                max_block, left, &room);
        if (got == -2) {
            state[17] = room;
            state[10] = 2;
            break;
        }
        if (got < 0) break;
        /* a block's records hold at most lim bytes of each kind and lim / 2 headers */
        const i64 bound[6] = {cnt, lim, lim, lim / 2, lim, lim};
        int roomy = 1;
        for (int f = 0; f < (headers ? 6 : 3); f++) roomy &= bound[f] <= cap[f] - c.used[f];
        if (roomy) { /* one pass: each record appended once checked */
            for (k = 0; k < cnt; k++) {
                record_t r;
                if (!check_record(data, p, lim, last_delta[b], prev, &r)) break;
                prev = r.od;
                p = r.end;
                put_record(&c, &r, data, b, base_offset, base_ts, max_ts, log_append, pid, tx,
                           (int)headers);
            }
            if (k < cnt || p != lim) break;
        } else { /* near the chunk's end: checked, then appended if they fit */
            i64 need[6] = {cnt, 0, 0, 0, 0, 0};
            for (k = 0; k < cnt; k++) {
                record_t *r = recs + k;
                if (!check_record(data, p, lim, last_delta[b], prev, r)) break;
                prev = r->od;
                need[1] += r->kl > 0 ? r->kl : 0;
                need[2] += r->vl > 0 ? r->vl : 0;
                need[3] += r->hc;
                need[4] += r->hkb;
                need[5] += r->hvb;
                p = r->end;
            }
            if (k < cnt || p != lim) break;
            if (!headers) need[3] = need[4] = need[5] = 0;
            int fits = 1;
            for (int f = 0; f < 6; f++) fits &= need[f] <= cap[f] - c.used[f];
            if (!fits) {
                for (int f = 0; f < 6; f++) state[11 + f] = need[f];
                state[10] = 1;
                break;
            }
            for (k = 0; k < cnt; k++)
                put_record(&c, recs + k, data, b, base_offset, base_ts, max_ts, log_append, pid,
                           tx, (int)headers);
        }
        left -= got;
    }
    if (b < nb && !state[10]) state[10] = 3;
    for (int f = 0; f < 6; f++) state[f] = c.used[f];
    state[6] = c.kn;
    state[7] = c.vn;
    state[8] = c.hvn;
    state[9] = left;
    return b;
}

/* XXH64 (Yann Collet's xxHash, 64-bit, as its spec XXH64 defines it; little-endian reads)
 * of data[off[i]:off[i+1]] for i < n, seed 0: an Arrow binary (int32 offsets, wide 0) or
 * large_binary (int64, wide 1) column's values; a null's (empty) bytes hash like b"". The
 * numpy twin is seglake.record.key_hash (tests compare them and known vectors). */
#define XP1 0x9E3779B185EBCA87ULL
#define XP2 0xC2B2AE3D27D4EB4FULL
#define XP3 0x165667B19E3779F9ULL
#define XP4 0x85EBCA77C2B2AE63ULL
#define XP5 0x27D4EB2F165667C5ULL
static inline u64 rotl64(u64 x, int r) { return (x << r) | (x >> (64 - r)); }
static inline u64 rd64(const u8 *p) { u64 v; memcpy(&v, p, 8); return v; }
static inline uint32_t rd32(const u8 *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline u64 xround(u64 acc, u64 in) { return rotl64(acc + in * XP2, 31) * XP1; }
static inline u64 xmerge(u64 h, u64 v) { return (h ^ xround(0, v)) * XP1 + XP4; }
static u64 xxh64(const u8 *p, i64 len) {
    const u8 *end = p + len;
    u64 h;
    if (len >= 32) {
        u64 v1 = XP1 + XP2, v2 = XP2, v3 = 0, v4 = 0 - XP1;
        const u8 *lim = end - 32;
        do {
            v1 = xround(v1, rd64(p));
            v2 = xround(v2, rd64(p + 8));
            v3 = xround(v3, rd64(p + 16));
            v4 = xround(v4, rd64(p + 24));
            p += 32;
        } while (p <= lim);
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = xmerge(xmerge(xmerge(xmerge(h, v1), v2), v3), v4);
    } else {
        h = XP5;
    }
    h += (u64)len;
    for (; p + 8 <= end; p += 8) h = rotl64(h ^ xround(0, rd64(p)), 27) * XP1 + XP4;
    if (p + 4 <= end) {
        h = rotl64(h ^ ((u64)rd32(p) * XP1), 23) * XP2 + XP3;
        p += 4;
    }
    for (; p < end; p++) h = rotl64(h ^ (*p * XP5), 11) * XP1;
    h ^= h >> 33;
    h *= XP2;
    h ^= h >> 29;
    h *= XP3;
    return h ^ (h >> 32);
}

void sl_xxh64(i64 n, const void *off, i64 wide, const u8 *data, u64 *out) {
    if (wide) {
        const i64 *o = (const i64 *)off;
        for (i64 i = 0; i < n; i++) out[i] = xxh64(data + o[i], o[i + 1] - o[i]);
    } else {
        const i32 *o = (const i32 *)off;
        for (i64 i = 0; i < n; i++) out[i] = xxh64(data + o[i], (i64)o[i + 1] - o[i]);
    }
}

/* The n (hash, offset) pairs sorted by hash, stable (equal hashes keep their order: the
 * offsets ascending): LSD radix sort, eight passes of 8 bits through the scratch arrays
 * h2, v2 (n each); the result is back in h, v. The numpy twin: argsort(kind="stable"). */
void sl_sort_pairs(i64 n, u64 *h, uint32_t *v, u64 *h2, uint32_t *v2) {
    i64 count[8][256]; /* on the stack: callers may run in threads */
    memset(count, 0, sizeof count);
    for (i64 i = 0; i < n; i++)
        for (int p = 0; p < 8; p++) count[p][(h[i] >> (8 * p)) & 255]++;
    for (int p = 0; p < 8; p++) {
        i64 at = 0;
        for (int d = 0; d < 256; d++) {
            i64 c = count[p][d];
            count[p][d] = at;
            at += c;
        }
        for (i64 i = 0; i < n; i++) {
            i64 to = count[p][(h[i] >> (8 * p)) & 255]++;
            h2[to] = h[i];
            v2[to] = v[i];
        }
        u64 *th = h; h = h2; h2 = th;
        uint32_t *tv = v; v = v2; v2 = tv;
    }
}

/* Parquet's split-block bloom filter (BloomFilter.md): each of the n hashes sets one bit
 * in each of the 8 words of block ((h >> 32) * blocks) >> 32: bit (lo32(h) * SALT[k]) >> 27
 * of word k. words: blocks * 8 uint32, zeroed by the caller. */
void sl_sbbf(i64 n, const u64 *h, i64 blocks, uint32_t *words) {
    static const uint32_t salt[8] = {0x47b6137bU, 0x44974d91U, 0x8824ad5bU, 0xa2b7289dU,
                                     0x705495c7U, 0x2df1424bU, 0x9efc4947U, 0x5c6bfb31U};
    for (i64 i = 0; i < n; i++) {
        u64 b = ((h[i] >> 32) * (u64)blocks) >> 32;
        uint32_t x = (uint32_t)h[i];
        uint32_t *w = words + 8 * b;
        for (int k = 0; k < 8; k++) w[k] |= 1U << ((x * salt[k]) >> 27);
    }
}
