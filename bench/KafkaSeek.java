// K3's peer (bench/kafka.py): point lookups as a Kafka user does them today, one consumer
// per partition seeking each queried offset and polling its record. Run by bench/kafka.py
// as a single-file program on Kafka's own client jars (java -cp '.jars/kafka/*' ...):
//
//   java -cp '.jars/kafka/*' bench/KafkaSeek.java BOOTSTRAP TOPIC QUERIES ANSWERS
//
// QUERIES: one "partition offset" a line. Each line read on stdin starts a round that
// answers every query in the file's order (seek, then poll until the partition returns a
// record at or after the offset: what a fetch from that offset returns), so the caller
// can interleave rounds with other cases; the first is the warm-up (connections,
// metadata, JIT). Prints "round N SECONDS" after each round, round 1's answers written
// to ANSWERS first (outside the time, so the caller can read them as soon as the line
// comes) as "partition offset key value" (hex, "-" for null) for bench/broker_peers.py
// to compare with seglake's. Consumer settings: the smallest fetch (max.partition.fetch.bytes=1: the
// broker still returns the first whole batch), one record a poll, no group.
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class KafkaSeek {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        List<String> lines = Files.readAllLines(Path.of(args[2]));
        Path answers = Path.of(args[3]);
        int n = lines.size();
        int[] parts = new int[n];
        long[] offsets = new long[n];
        for (int i = 0; i < n; i++) {
            String[] f = lines.get(i).trim().split(" ");
            parts[i] = Integer.parseInt(f[0]);
            offsets[i] = Long.parseLong(f[1]);
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("enable.auto.commit", "false");
        props.put("max.partition.fetch.bytes", "1");
        props.put("fetch.max.bytes", "1");
        props.put("max.poll.records", "1");
        Map<Integer, KafkaConsumer<byte[], byte[]>> consumers = new HashMap<>();
        for (int p : parts) {
            consumers.computeIfAbsent(p, k -> {
                KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props);
                c.assign(List.of(new TopicPartition(topic, k)));
                return c;
            });
        }
        HexFormat hex = HexFormat.of();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in));
        for (int r = 1; stdin.readLine() != null; r++) {
            List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>(n);
            long t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                KafkaConsumer<byte[], byte[]> c = consumers.get(parts[i]);
                TopicPartition tp = new TopicPartition(topic, parts[i]);
                c.seek(tp, offsets[i]);
                ConsumerRecord<byte[], byte[]> hit = null;
                while (hit == null) {
                    for (ConsumerRecord<byte[], byte[]> rec : c.poll(Duration.ofSeconds(30))) {
                        if (rec.offset() >= offsets[i]) {
                            hit = rec;
                            break;
                        }
                    }
                }
                got.add(hit);
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            if (r == 1) { // written before the round is reported: the caller reads them then
                try (BufferedWriter w = Files.newBufferedWriter(answers)) {
                    for (ConsumerRecord<byte[], byte[]> rec : got) {
                        w.write(rec.partition() + " " + rec.offset() + " "
                                + (rec.key() == null ? "-" : hex.formatHex(rec.key())) + " "
                                + (rec.value() == null ? "-" : hex.formatHex(rec.value())));
                        w.newLine();
                    }
                }
            }
            System.out.printf("round %d %.6f%n", r, seconds);
            System.out.flush();
        }
        for (KafkaConsumer<byte[], byte[]> c : consumers.values()) {
            c.close();
        }
    }
}
