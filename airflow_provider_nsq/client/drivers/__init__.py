"""One connection to nsqd, pumping the sans-I/O protocol core: what both drivers share
(:mod:`.base`), the messages a connection delivered and their answers
(:mod:`.answering`), the blocking driver (:mod:`.blocking_driver`, ``NSQConnection``) and
the asyncio one (:mod:`.asyncio_driver`, ``AsyncNSQConnection``, with its
:mod:`.reply_queue` and :mod:`.shared_task`).
"""
