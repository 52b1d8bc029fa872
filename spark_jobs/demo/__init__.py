"""The Borealis load-management demo, live: service, agents, Spark fragments, traffic, report."""
