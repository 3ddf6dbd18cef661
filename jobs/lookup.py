"""spark-submit entry point: `./spark-submit.sh lookup --help`."""

import sys

from seglake.spark.jobs import main

if __name__ == "__main__":
    sys.exit(main("lookup", sys.argv[1:]))
