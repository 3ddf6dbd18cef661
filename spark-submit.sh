#!/usr/bin/env bash
# Submit a seglake job:  ./spark-submit.sh [spark-submit options] JOB [job arguments]
#   JOB is a file in jobs/ (ingest, extract, lookup, ...); `./spark-submit.sh JOB --help` lists its arguments.
#   Spark options before JOB pass through to spark-submit (--master, --conf k=v, --executor-memory ...).
#   Default master: local[*] (or $SEGLAKE_MASTER). lib/seglake is zipped for --py-files, so the
#   same command runs on a cluster; executors need seglake's dependencies (pyarrow, numpy,
#   crc32c, cramjam, deltalake), e.g. through --archives with a packed venv.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ] || [ ! -x "$venv/bin/spark-submit" ]; then
  echo "spark-submit.sh: $venv is not set up; run 'make venv' (or 'make demo') first" >&2
  exit 2
fi
py="$venv/bin/python"

usage() {
  echo "usage: ./spark-submit.sh [spark-submit options] JOB [job arguments]" >&2
  echo "jobs: $(cd "$here/jobs" && ls *.py 2>/dev/null | sed 's/\.py$//' | grep -v '^_' | tr '\n' ' ')" >&2
  exit 2
}

spark_opts=()
master=""
job=""
while [ $# -gt 0 ]; do
  case "$1" in
    --verbose|--supervise) spark_opts+=("$1"); shift ;;
    --master) master="$2"; shift 2 ;;
    --master=*) master="${1#--master=}"; shift ;;
    --*=*) spark_opts+=("$1"); shift ;;
    --*) [ $# -ge 2 ] || usage; spark_opts+=("$1" "$2"); shift 2 ;;
    -h|help) usage ;;
    *) job="$1"; shift; break ;;
  esac
done
[ -n "$job" ] || usage
script="$here/jobs/$job.py"
[ -f "$script" ] || { echo "spark-submit.sh: no job '$job' (no $script)" >&2; usage; }
# arguments, --root, input paths and topics checked before a JVM starts (seconds):
# one line and exit 2, or --help printed (3); not for a driver run on the cluster
# (--deploy-mode cluster), whose paths may exist only there
checked=0
case " ${spark_opts[*]-} " in
  *" --deploy-mode cluster "*|*" --deploy-mode=cluster "*) ;;
  *) "$py" -m seglake.cli.jobargs "$job" "$@" || checked=$? ;;
esac
[ "$checked" = 3 ] && exit 0
[ "$checked" = 0 ] || exit "$checked"

mkdir -p "$here/build"
zip="$here/build/seglake.zip"
# re-zip when any source is newer than the zip
if [ ! -f "$zip" ] || [ -n "$(find "$here/lib/seglake" "$here/schemas" -newer "$zip" -print -quit)" ]; then
  rm -f "$zip"
  (cd "$here/lib" && "$py" -c "
import pathlib, zipfile
with zipfile.ZipFile('$zip', 'w', zipfile.ZIP_DEFLATED) as z:
    for p in sorted(pathlib.Path('seglake').rglob('*')):
        if p.is_file() and '__pycache__' not in p.parts:
            z.write(p)
    for p in sorted(pathlib.Path('../schemas').glob('*.json')):
        z.write(p, 'seglake/schemas/' + p.name)
")
fi

export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$py}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$py}"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
export SPARK_SUBMIT_ORIGIN=seglake
# Spark's log goes to a file (conf/log4j2.properties): a failed task's traceback stays
# there; the job's one error line comes back through $SEGLAKE_ERROR_FILE and is printed
# on stderr last (spark-submit sends the Python driver's stderr to its stdout)
logdir="${SEGLAKE_LOG_DIR:-$here/build/logs}"
mkdir -p "$logdir"
export SEGLAKE_LOG_FILE="$logdir/$job-$(date -u +%Y%m%dT%H%M%S)-$$.log"
export SEGLAKE_ERROR_FILE="$(mktemp "${TMPDIR:-/tmp}/seglake-$job-error.XXXXXX")"
trap 'rm -f "$SEGLAKE_ERROR_FILE"' EXIT
log4j="-Dlog4j.configurationFile=file:$here/conf/log4j2.properties -Dseglake.log.file=$SEGLAKE_LOG_FILE"
executor_log4j="-Dlog4j.configurationFile=file:$here/conf/log4j2-executor.properties"
# Spark's Kafka connector and delta-spark, when `make jars` fetched them (.jars/spark)
jar_opts=()
jars="$(ls "$here"/.jars/spark/*.jar 2>/dev/null | paste -sd, -)"
if [ -n "$jars" ]; then
  jar_opts+=(--jars "$jars")
  if ls "$here"/.jars/spark/delta-spark*.jar >/dev/null 2>&1; then
    jar_opts+=(--conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension
      --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog)
  fi
fi

"$venv/bin/spark-submit" \
  --master "${master:-${SEGLAKE_MASTER:-local[*]}}" \
  --properties-file "$here/conf/spark-defaults.conf" \
  --driver-java-options "$log4j" \
  --conf "spark.executor.extraJavaOptions=$executor_log4j" \
  --py-files "$zip" \
  ${jar_opts[@]+"${jar_opts[@]}"} \
  ${spark_opts[@]+"${spark_opts[@]}"} \
  "$script" "$@" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' TERM INT HUP
rc=0
wait "$pid" || rc=$?
while kill -0 "$pid" 2>/dev/null; do  # a trapped signal ended the wait, not the job
  rc=0
  wait "$pid" || rc=$?
done
if [ -s "$SEGLAKE_ERROR_FILE" ]; then
  [ -t 2 ] && printf '\r\033[K' >&2  # over a progress bar a failed stage left
  cat "$SEGLAKE_ERROR_FILE" >&2
fi
exit "$rc"
