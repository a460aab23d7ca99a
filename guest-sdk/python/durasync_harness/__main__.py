"""`python3 -m durasync_harness wit` prints the folder holding the WIT
(`durasync.wit`) that componentize-py builds a plugin against (its `-d`)."""

import sys

import durasync_harness

USAGE = "usage: python3 -m durasync_harness wit   (prints the WIT folder, for componentize-py -d)"

if sys.argv[1:] == ["wit"]:
    print(durasync_harness.WIT)
elif sys.argv[1:] in (["-h"], ["--help"]):
    print(USAGE)
else:
    sys.exit(USAGE)
