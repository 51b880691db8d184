"""Logic that both I/O styles need, written once: a sequence yields steps
(:mod:`.steps`) and one runner per I/O style performs them: blocking sockets
(:mod:`.blocking_runner`, opening many connections at once with
:mod:`.blocking_connect`) or the asyncio event loop (:mod:`.asyncio_runner`).
"""
