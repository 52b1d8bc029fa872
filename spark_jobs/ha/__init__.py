"""High availability on real processes: DPC nodes over Arrow Flight, a fault-injecting TCP
proxy for the links between them, failover through the movement path, and the scenarios."""
