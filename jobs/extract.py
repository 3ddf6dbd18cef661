"""spark-submit entry point: `./spark-submit.sh extract --help`."""

import sys

from seglake.spark.jobs import main

if __name__ == "__main__":
    sys.exit(main("extract", sys.argv[1:]))
