"""spark-submit entry point: `./spark-submit.sh ingest --help`."""

import sys

from seglake.spark.jobs import main

if __name__ == "__main__":
    sys.exit(main("ingest", sys.argv[1:]))
