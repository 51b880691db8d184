"""Administration: NSQAdminHook's create, delete, empty, pause and unpause of a topic or a
channel, on one nsqd, on every nsqd nsqlookupd lists (and in the lookupds' registry, as
nsqadmin does), or on the one ``nsqd`` names; what could not be reached is an error
that names it, after the rest was done; and the operators in a DAG run, each nsqd's
result in XCom.

Against the embedded daemons, or the real ones of ``NSQD_ADDRESS`` /
``NSQD_HTTP_ADDRESS`` / ``NSQLOOKUPD_HTTP_ADDRESS``.
"""

from __future__ import annotations

import pytest

from airflow_provider_nsq.hooks.admin import NSQAdminHook
from airflow_provider_nsq.hooks.nsq import NSQHook
from airflow_provider_nsq.operators.nsq_admin import (
    NSQCreateTopicOperator,
    NSQDeleteChannelOperator,
    NSQPauseChannelOperator,
)
from airflow_provider_nsq.protocol.errors import NSQAdminError, NSQValueError
from airflow_provider_nsq.testing.polling import wait_for
from tests.support.airflow_runs import TEST_DAGS, load_dag, run_dag
from tests.support.net import closed_port

DAGS = TEST_DAGS / "nsq_admin_dags.py"


def test_a_topic_and_a_channel_from_birth_to_deletion(nsqd, nsq_default, nsq_topic):
    hook = NSQAdminHook()
    here = nsqd.http_address
    created = hook.create_topic(nsq_topic)
    assert created["nsqds"] == {here: "created"}
    assert created["errors"] == {} and created["action"] == "create_topic"
    assert hook.create_topic(nsq_topic)["nsqds"] == {here: "exists"}
    assert hook.create_channel(nsq_topic, "etl")["nsqds"] == {here: "created"}
    nsqd.http_publish(nsq_topic, b"waits")
    assert nsqd.channel_stats(nsq_topic, "etl")["depth"] == 1

    assert hook.pause_channel(nsq_topic, "etl")["nsqds"] == {here: "paused"}
    assert nsqd.channel_stats(nsq_topic, "etl")["paused"] is True
    assert hook.unpause_channel(nsq_topic, "etl")["nsqds"] == {here: "unpaused"}
    assert hook.empty_channel(nsq_topic, "etl")["nsqds"] == {here: "emptied"}
    assert nsqd.channel_stats(nsq_topic, "etl")["depth"] == 0

    assert hook.pause_topic(nsq_topic)["nsqds"] == {here: "paused"}
    assert nsqd.topic_stats(nsq_topic)["paused"] is True
    assert hook.unpause_topic(nsq_topic)["nsqds"] == {here: "unpaused"}
    assert hook.empty_topic(nsq_topic)["nsqds"] == {here: "emptied"}

    assert hook.delete_channel(nsq_topic, "etl")["nsqds"] == {here: "deleted"}
    assert nsqd.channel_stats(nsq_topic, "etl") is None
    assert hook.delete_topic(nsq_topic)["nsqds"] == {here: "deleted"}
    assert nsqd.topic_stats(nsq_topic) is None
    # Deleting what is gone succeeds, unless told to fail.
    assert hook.delete_topic(nsq_topic)["nsqds"] == {here: "not_found"}
    with pytest.raises(NSQAdminError, match=f"does not exist on {here}"):
        hook.delete_topic(nsq_topic, fail_if_not_exists=True)


def test_create_what_exists_fails_only_when_asked(nsqd, nsq_default, nsq_topic):
    hook = NSQHook()  # NSQHook has the admin hook's methods
    nsqd.create_channel(nsq_topic, "etl")
    assert hook.create_channel(nsq_topic, "etl")["nsqds"] == {nsqd.http_address: "exists"}
    with pytest.raises(NSQAdminError, match="exists already on") as raised:
        hook.create_channel(nsq_topic, "etl", fail_if_exists=True)
    assert raised.value.result.nsqds == {nsqd.http_address: "exists"}


def test_pausing_what_does_not_exist_fails_unless_told_not_to(nsqd, nsq_default, nsq_topic):
    hook = NSQAdminHook()
    with pytest.raises(NSQAdminError, match="does not exist on"):
        hook.pause_channel(nsq_topic, "nowhere")
    done = hook.pause_channel(nsq_topic, "nowhere", fail_if_not_exists=False)
    assert done["nsqds"] == {nsqd.http_address: "not_found"}
    assert nsqd.topic_stats(nsq_topic) is None  # nothing was created on the way


def test_an_unreachable_nsqd_is_named_after_the_others_were_done(nsqd, nsq_default, nsq_topic):
    hook = NSQAdminHook()
    nsqd.create_channel(nsq_topic, "etl")
    dead = f"127.0.0.1:{closed_port()}"
    with pytest.raises(NSQAdminError, match=f"nsqd {dead} ") as raised:
        hook.pause_channel(nsq_topic, "etl", nsqd=[nsqd.http_address, dead])
    assert nsqd.channel_stats(nsq_topic, "etl")["paused"] is True  # done on the live one
    result = raised.value.result
    assert result.nsqds == {nsqd.http_address: "paused"}
    assert list(result.errors) == [f"nsqd {dead}"]
    hook.unpause_channel(nsq_topic, "etl")


def test_a_connection_without_an_http_api_says_what_is_missing(monkeypatch, nsqd, nsq_topic):
    monkeypatch.setenv("AIRFLOW_CONN_NSQ_DEFAULT", f"nsq://{nsqd.tcp_address}")
    with pytest.raises(NSQValueError, match="gives no http_port"):
        NSQAdminHook().create_topic(nsq_topic)
    # Naming the nsqd needs nothing more.
    done = NSQAdminHook().create_topic(nsq_topic, nsqd=nsqd.http_address)
    assert done["nsqds"] == {nsqd.http_address: "created"}


def test_two_nsqds_on_one_host_are_not_guessed(monkeypatch, nsq_topology, nsq_topic):
    topology = nsq_topology(n=2)
    first, second = topology.nsqds
    if first.host != second.host:
        pytest.skip("needs two nsqds on one host")
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT",
        f"nsq://{first.tcp_address}?http_port={first.http_port}"
        f"&nsqd_tcp_addresses={second.tcp_address}",
    )
    with pytest.raises(NSQValueError, match="share host"):
        NSQAdminHook().create_topic(nsq_topic)


@pytest.fixture
def through_lookupd(monkeypatch, nsq_topology):
    topology = nsq_topology(n=2)
    monkeypatch.setenv(
        "AIRFLOW_CONN_NSQ_DEFAULT",
        f"nsq://{topology.nsqds[0].tcp_address}?lookupd_http_addresses="
        + ",".join(topology.lookupd_http_addresses),
    )
    return topology


def _on_every_nsqd(topology, topic: str, channel: str) -> None:
    for nsqd in topology.nsqds:
        nsqd.create_channel(topic, channel)
    topology.wait_for_producers(topic)


def test_through_lookupd_every_nsqd_of_the_topic_and_one_by_name(through_lookupd, nsq_topic):
    topology = through_lookupd
    _on_every_nsqd(topology, nsq_topic, "etl")
    hook = NSQAdminHook()
    everywhere = set(topology.nsqd_http_addresses)

    paused = hook.pause_channel(nsq_topic, "etl")
    assert set(paused["nsqds"]) == everywhere
    assert set(paused["nsqds"].values()) == {"paused"}
    assert paused["lookupds"] == {}  # pausing is the nsqds' business only
    assert all(n.channel_stats(nsq_topic, "etl")["paused"] for n in topology.nsqds)

    one = topology.nsqds[1].http_address
    assert hook.unpause_channel(nsq_topic, "etl", nsqd=one)["nsqds"] == {one: "unpaused"}
    states = [n.channel_stats(nsq_topic, "etl")["paused"] for n in topology.nsqds]
    assert states == [True, False]
    hook.unpause_channel(nsq_topic, "etl")


def test_a_topic_deleted_through_lookupd_is_gone_from_it_and_every_nsqd(through_lookupd, nsq_topic):
    topology = through_lookupd
    _on_every_nsqd(topology, nsq_topic, "etl")
    lookupd = topology.lookupd
    deleted = NSQAdminHook().delete_topic(nsq_topic)
    assert deleted["nsqds"] == dict.fromkeys(topology.nsqd_http_addresses, "deleted")
    assert deleted["lookupds"] == {lookupd.http_address: "deleted"}
    assert all(n.topic_stats(nsq_topic) is None for n in topology.nsqds)
    # nsqlookupd forgot the topic: no nsqd comes back with it.
    wait_for(lambda: lookupd.lookup(nsq_topic) is None, timeout=10)


def test_a_channel_created_through_lookupd_reaches_an_nsqd_that_gets_the_topic_later(
    through_lookupd, nsq_topic
):
    topology = through_lookupd
    created = NSQAdminHook().create_channel(nsq_topic, "etl")
    assert created["nsqds"] == {}  # no nsqd has the topic yet
    assert created["lookupds"] == {topology.lookupd.http_address: "created"}
    later = topology.nsqds[1]
    later.http_publish(nsq_topic, b"first")  # the nsqd creates the channel lookupd lists
    wait_for(lambda: (later.channel_stats(nsq_topic, "etl") or {}).get("depth") == 1, timeout=10)
    NSQAdminHook().delete_topic(nsq_topic)


def test_the_operators_check_their_arguments_when_the_dag_is_parsed():
    with pytest.raises(NSQValueError, match="takes fail_if_exists, not fail_if_not_exists"):
        NSQCreateTopicOperator(task_id="t", topic="t", fail_if_not_exists=True)
    with pytest.raises(NSQValueError, match="'bad channel'"):
        NSQDeleteChannelOperator(task_id="t", topic="t", channel="bad channel")
    op = NSQPauseChannelOperator(task_id="t", topic="{{ params.t }}", channel="{{ params.c }}")
    assert set(op.template_fields) == {"topic", "channel", "nsqd", "nsq_conn_id"}
    assert op.fail is True  # pausing what is not there fails by default


@pytest.mark.usefixtures("airflow_db")
def test_a_dag_run_administers_a_topic_with_each_nsqds_result_in_xcom(nsqd, nsq_default, nsq_topic):
    here = nsqd.http_address
    run = run_dag(load_dag(DAGS, "nsq_admin_lifecycle"), topic=nsq_topic)
    assert run.state == "success", run
    outcomes = {task: value["nsqds"] for task, value in run.xcom.items()}
    assert outcomes == {
        "create_topic": {here: "created"},
        "create_channel": {here: "created"},
        "create_channel_again": {here: "exists"},
        "pause_topic": {here: "paused"},
        "empty_topic": {here: "emptied"},
        "unpause_topic": {here: "unpaused"},
        "pause_channel": {here: "paused"},
        "unpause_channel": {here: "unpaused"},
        "empty_channel": {here: "emptied"},
        "delete_channel": {here: "deleted"},
        "delete_topic": {here: "deleted"},
        "delete_topic_again": {here: "not_found"},
    }
    assert run.xcom["delete_channel"]["channel"] == "etl"
    assert nsqd.topic_stats(nsq_topic) is None


@pytest.mark.usefixtures("airflow_db")
def test_fail_if_exists_fails_the_task(nsqd, nsq_default, nsq_topic):
    nsqd.create_topic(nsq_topic)
    run = run_dag(load_dag(DAGS, "nsq_admin_strict"), topic=nsq_topic)
    assert run.task_states == {"create": "failed"}
