"""spark-submit entry point: `./spark-submit.sh recover --help`."""

import sys

from seglake.spark.jobs import main

if __name__ == "__main__":
    sys.exit(main("recover", sys.argv[1:]))
