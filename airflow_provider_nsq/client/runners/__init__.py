"""Logic that both I/O styles need, written once: a sequence yields steps
(:mod:`.steps`) and one runner per I/O style performs them: blocking sockets
(:mod:`.blocking_runner`, which also opens many connections at once over one selector)
or the asyncio event loop (:mod:`.asyncio_runner`).
"""
