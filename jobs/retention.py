"""spark-submit entry point: `./spark-submit.sh retention --help`."""

import sys

from seglake.spark.jobs import main

if __name__ == "__main__":
    sys.exit(main("retention", sys.argv[1:]))
