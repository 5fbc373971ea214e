"""Delegated jobs across processes and machines: job queues on Redis Streams and NATS
JetStream (:mod:`rtgate.delegate.broker`), chosen by configuration
(:mod:`rtgate.delegate.factory`), and learned latency shared between replicas
(:mod:`rtgate.delegate.warm`). The queue interface and the in-process default are the
gate's own (:mod:`rtgate.gate.jobs`).
"""
