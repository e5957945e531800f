"""Named benchmark suites, their runner and the markdown made from their results folders."""
