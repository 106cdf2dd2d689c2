"""Intake: records from Kafka into the lanes (consumer wiring, admission, backpressure,
the in-flight budget) and the embedded broker used when none is configured."""
