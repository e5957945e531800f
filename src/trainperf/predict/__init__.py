"""How a step would scale: a schedule of one rank's compute and collectives, calibrated from
measured records, and checked against the measured multi-GPU rows (`trainperf predict`)."""
