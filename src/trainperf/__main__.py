"""`python -m trainperf` runs the command line."""

from trainperf.cli import main

main()
