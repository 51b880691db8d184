"""One connection to nsqd, pumping the sans-I/O protocol core: what both drivers share
(:mod:`.base`: the protocol object, its dispatch, the messages delivered and their
answers), the blocking driver (:mod:`.blocking_driver`, ``NSQConnection``, with its
socket) and the asyncio one (:mod:`.asyncio_driver`, ``AsyncNSQConnection``, with its
Protocol, reply futures and shared reconnect).
"""
