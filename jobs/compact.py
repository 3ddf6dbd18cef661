"""spark-submit entry point: `./spark-submit.sh compact --help`."""

import sys

from seglake.spark.jobs import main

if __name__ == "__main__":
    sys.exit(main("compact", sys.argv[1:]))
