"""No stranger is obeyed: forged, replayed, impostor and out-of-range peer frames sent to every
broker of a real 3-broker cluster are refused and counted, and the cluster keeps taking
acknowledged writes. Frames signed with the cluster's secret but carrying another cluster id are
refused too (a broker must not be steered by a neighbouring cluster sharing the secret).

Why signing matters: before the peer frames were signed, one forged REPLICA_FETCH (follower=2,
fetch_end = the leader's end) advanced the leader's commit over data only it held, and one VOTE
of epoch 2**31-1 per broker left the cluster without a leader (the adopted epoch made the next
pre-vote fail to encode with struct.error, which killed the replication thread).

Each broker reaches each peer through a recording proxy (`peer_via_proxy=True`), so the test
holds real frames the brokers signed and can play them again. Every frame gets its own
connection (a connection's first frame binds it to a broker). Conditions are waited for with
deadlines; the refusals are read from each broker's /metrics before the outcome is checked.
"""

from __future__ import annotations

import time

import pytest

from common.kaska import Producer
from common.kaska.errors import AuthenticationError
from common.kaska.protocol.frames import REQUEST_HEADER, VERSION, Api
from common.kaska.retry import RetryPolicy
from services.broker.replication.wire.peer_auth import RequestStamp, request_trailer
from services.broker.replication.wire.replica_fetch import ReplicaFetchRequest
from services.broker.replication.wire.vote import VoteRequest
from tests.integration.broker.broker_process import raw_connect, read_answer, send_request
from tests.integration.metrics_scrape import excerpt, scrape
from tests.integration.replication.cluster import FAST_ELECTIONS, BrokerCluster
from tests.integration.replication.workload import read_back

pytestmark = [pytest.mark.integration]

TOPIC = "guarded"
HUGE_EPOCH = 2**31 - 1
WRONG_SECRET = b"not-the-cluster-secret"
WAIT_S = 20.0
REFUSED = "kaska_peer_frames_refused_total"
# Every reason this test provokes at each broker, at least once.
REASONS = ("truncated", "unauthenticated", "impostor", "out_of_range", "replayed",
           "misdirected", "cluster_mismatch")
OTHER_CLUSTER = "another-cluster"


def wait_until(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.05)


def signed(request, secret: bytes, sender: int, receiver: int, counter: int,
           cluster_id: str, incarnation: int = 1) -> bytes:
    """`request`'s body with a trailer signed by `secret` as broker `sender` of `cluster_id`."""
    body = request.encode()
    stamp = RequestStamp(sender, receiver, incarnation, counter, round(time.time() * 1000),
                         cluster_id)
    return body + request_trailer(secret, request.API, VERSION, (body,), stamp)


def send_frame(cluster: BrokerCluster, broker: int, api: int, body: bytes) -> int:
    """Send one request frame on a fresh connection; its answer's error code."""
    with raw_connect(cluster.brokers[broker]) as sock:
        send_request(sock, api, body)
        answer = read_answer(sock)
    assert answer is not None, f"broker {broker} closed the connection instead of answering"
    return answer[1]


def recorded_frames(stream: bytes) -> list[tuple[int, bytes]]:
    """(api, body) of each whole request frame in a recorded byte stream."""
    frames, position = [], 0
    while position + REQUEST_HEADER.size <= len(stream):
        length, api, _version, _correlation = REQUEST_HEADER.unpack_from(stream, position)
        end = position + 4 + length
        if end > len(stream):
            break
        frames.append((api, stream[position + REQUEST_HEADER.size:end]))
        position = end
    return frames


def captured_to(cluster: BrokerCluster, receiver: int) -> list[tuple[int, bytes]]:
    """Real replication frames the other brokers sent to `receiver` (through its proxies)."""
    frames = []
    for sender in cluster.others(receiver):
        for stream in cluster.proxies[(sender, receiver)].requests_seen():
            frames.extend(frame for frame in recorded_frames(stream)
                          if frame[0] in (Api.VOTE, Api.REPLICA_FETCH))
    return frames


def refusals(cluster: BrokerCluster, broker: int) -> dict[str, float]:
    _text, samples = scrape(cluster.metrics_ports[broker])
    return {dict(labels)["reason"]: value for (name, labels), value in samples.items()
            if name == REFUSED and dict(labels)["direction"] == "request"}


def metric(cluster: BrokerCluster, broker: int, name: str) -> float:
    _text, samples = scrape(cluster.metrics_ports[broker])
    return samples[(name, (("group", "0"),))]


def produce_acked(cluster: BrokerCluster, values: list[bytes]) -> int:
    with Producer(cluster.bootstrap, retry=RetryPolicy(20, 0.1, 1.0), request_timeout_s=10.0,
                  connect_timeout_s=1.0) as producer:
        return producer.send_batch(TOPIC, 0, values)


def attack(cluster: BrokerCluster, target: int, leader: int,
           leader_end: int) -> list[tuple[str, int]]:
    """Every kind of bad frame at `target`; [(what, error code)]."""
    # The finding's frame: follower 2 (or, sent to broker 2, follower 1) at the leader's end.
    peer = 2 if target != 2 else 1
    (other,) = [i for i in cluster.ids if i not in (target, peer)]
    secret = cluster.secret
    ours = cluster.cluster_id
    huge_vote = VoteRequest(peer, HUGE_EPOCH, HUGE_EPOCH, 1 << 40, pre_vote=False)
    forged_fetch = ReplicaFetchRequest(peer, 1, leader_end, 1, 1 << 20, 0)
    answers = [
        ("unsigned vote of epoch 2**31-1",
         send_frame(cluster, target, Api.VOTE, huge_vote.encode())),
        ("vote of epoch 2**31-1 under another secret",
         send_frame(cluster, target, Api.VOTE,
                    signed(huge_vote, WRONG_SECRET, peer, target, 1, ours))),
        (f"fetch as follower {peer} to the leader's end under another secret",
         send_frame(cluster, target, Api.REPLICA_FETCH,
                    signed(forged_fetch, WRONG_SECRET, peer, target, 1, ours))),
        (f"fetch claiming follower {peer}, signed by {other}",
         send_frame(cluster, target, Api.REPLICA_FETCH,
                    signed(forged_fetch, secret, other, target, 1, ours))),
        ("vote signed with the secret, of another cluster",
         send_frame(cluster, target, Api.VOTE, signed(
             VoteRequest(peer, 1, 0, 0, pre_vote=True), secret, peer, target, 1,
             OTHER_CLUSTER))),
        ("signed vote of epoch 2**31-1",
         send_frame(cluster, target, Api.VOTE,
                    signed(huge_vote, secret, peer, target, 1, ours))),
        ("signed fetch with fetch_end 2**63-1",
         send_frame(cluster, target, Api.REPLICA_FETCH, signed(
             ReplicaFetchRequest(peer, 1, 2**63 - 1, 1, 1 << 20, 0), secret, peer, target, 1,
             ours))),
    ]
    # Replays. Real frames the other brokers sent to `target`: the leader always has its
    # followers' fetches; a follower has votes only if it listened during the election.
    captured = captured_to(cluster, target)
    assert captured or target != leader, f"no fetch to the leader {target} was recorded"
    for api, body in captured[:3]:
        answers.append((f"replayed {Api(api).name}", send_frame(cluster, target, api, body)))
    # And, at every broker, one harmless signed frame sent twice (a pre-vote of epoch 0 changes
    # no state): the first is taken, or refused as older than `peer`'s real incarnation when
    # `target` already heard from it; the second is a replay either way.
    pre_vote = signed(VoteRequest(peer, 0, 0, 0, pre_vote=True), secret, peer, target, 1,
                      ours)
    send_frame(cluster, target, Api.VOTE, pre_vote)
    answers.append(("the same signed pre-vote again", send_frame(cluster, target, Api.VOTE,
                                                                 pre_vote)))
    # Misdirected: signed for another broker (a recorded one when there is, and a fresh one).
    for api, body in captured_to(cluster, leader if target != leader else peer)[:1]:
        answers.append((f"recorded {Api(api).name} meant for another broker",
                        send_frame(cluster, target, api, body)))
    answers.append((f"pre-vote signed for broker {other}", send_frame(
        cluster, target, Api.VOTE,
        signed(VoteRequest(peer, 0, 0, 0, pre_vote=True), secret, peer, other, 2,
               ours))))
    return answers


@pytest.mark.timeout(120)
def test_forged_replayed_and_out_of_range_frames_are_refused_and_writes_go_on(make_cluster):
    cluster = make_cluster(peer_via_proxy=True, extra_args=FAST_ELECTIONS)
    cluster.create_topic(TOPIC, 1)
    before = [f"before-{i}".encode() for i in range(5)]
    assert produce_acked(cluster, before) == 0
    leader = cluster.leader()
    leader_end = int(metric(cluster, leader.leader_id, "kaska_replication_journal_end_index"))
    baseline = {i: refusals(cluster, i) for i in cluster.ids}

    for target in cluster.ids:
        for what, code in attack(cluster, target, leader.leader_id, leader_end):
            assert code == AuthenticationError.code, \
                f"broker {target} answered {what} with error code {code}, not a refusal"

    def all_counted():
        counts = {i: refusals(cluster, i) for i in cluster.ids}
        return all(counts[i].get(reason, 0) > baseline[i].get(reason, 0)
                   for i in cluster.ids for reason in REASONS) and counts
    counts = wait_until(all_counted, WAIT_S, "every broker counting every kind of refusal")
    print({i: counts[i] for i in cluster.ids})
    print(excerpt(scrape(cluster.metrics_ports[leader.leader_id])[0], REFUSED))

    after = [f"after-{i}".encode() for i in range(5)]
    assert produce_acked(cluster, after) == len(before)
    stored, high_watermarks = read_back(cluster.bootstrap, TOPIC, [0])
    assert [value for _offset, value in stored[0]] == before + after
    assert high_watermarks[0] == len(before) + len(after)
    for i in cluster.ids:
        epoch = metric(cluster, i, "kaska_replication_epoch")
        assert epoch < 1000, f"broker {i} adopted epoch {epoch}"
        assert not cluster.log_lines(i, "struct.error|Traceback"), \
            f"broker {i}: {cluster.log_lines(i, 'struct.error|Traceback')[:3]}"
        assert cluster.log_lines(i, "refused a peer request"), f"broker {i} logged no refusal"
