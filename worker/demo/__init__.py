"""The demo: its models (built from data packages ship), its labelled workload, the
``inferlane demo`` run and ``inferlane publish-demo``."""
