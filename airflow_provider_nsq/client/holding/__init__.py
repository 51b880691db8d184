"""Messages held while user code runs.

- :mod:`.holder`: the one owner of a consumer while its messages are held (TOUCH on
  time, answers from one place, give-up to a dead-letter topic, close REQs the rest), in
  a blocking form and an asyncio sibling that share everything but their I/O;
- :mod:`.dead_letters`: the one dead-letter envelope; :mod:`.asyncio_dead_letters`
  publishes it with failover (:mod:`.blocking_dead_letters` is generated from it);
- :mod:`.apply`: consume and apply: a function called on each message (or batch), FIN
  when it returns, REQ with backoff when it raises, give-up after ``max_attempts``;
- :mod:`.function_thread`: the thread user code runs on, off the consumer's thread.
"""
