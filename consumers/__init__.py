"""The wire: Kafka consumer loop, message contract, offsets, dead letters, client."""
