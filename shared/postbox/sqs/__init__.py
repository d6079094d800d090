"""The SQS face of the queues: SQS's actions, credentials and signatures over the message engine.

A queue made through SQS is a Postbox queue (the queues surface, console and metrics see it); SQS
adds only what it knows beyond one (FIFO, attributes, tags) in its own tables.
"""
