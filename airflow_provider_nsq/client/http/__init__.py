"""nsqd's and nsqlookupd's HTTP APIs, written once as steps: which nsqds have a topic
(:mod:`.lookupd_api`), a channel's depth on one nsqd without taking anything
(:mod:`.nsqd_api`), and over every nsqd of a connection (:mod:`.channel_depth`);
creating, deleting, emptying, pausing and unpausing a topic or a channel on every nsqd
of the topic, as nsqadmin does (:mod:`.admin_api`).
"""
