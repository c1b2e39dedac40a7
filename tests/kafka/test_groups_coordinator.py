"""The classic-group state machine (broker/kafka/groups/coordinator.py) on a real
asyncio loop with short timeouts: generations, rebalances, sessions, static members.

Timeouts given to `asyncio.wait_for` are failure guards only; what the tests assert
is the order of events and the group's state.
"""

from __future__ import annotations

import asyncio

from broker.kafka.groups import coordinator as c
from broker.kafka.groups.coordinator import GroupCoordinator

GUARD = 10.0
SESSION = 400  # ms: the session timeout members ask for in these tests
PROTOCOLS = [("range", b"range-meta"), ("roundrobin", b"rr-meta")]


def make(**kwargs) -> GroupCoordinator:
    settings = dict(min_session_timeout_ms=10, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=0)
    settings.update(kwargs)
    return GroupCoordinator(**settings)


def join(coord, group, member_id="", *, session=SESSION, rebalance=5_000, protocols=PROTOCOLS,
         protocol_type="consumer", instance=None, client="client", v4=True, skip=False):
    return asyncio.ensure_future(coord.join(
        group, member_id, protocol_type=protocol_type, protocols=protocols, session_timeout_ms=session,
        rebalance_timeout_ms=rebalance, group_instance_id=instance, client_id=client,
        client_host="/127.0.0.1", require_known_member_id=v4, supports_skip_assignment=skip))


async def done(task):
    return await asyncio.wait_for(task, GUARD)


async def new_member(coord, group, **kwargs):
    """The two-step join of a v4+ dynamic member: the member id, then the parked join."""
    first = await done(join(coord, group, **kwargs))
    assert first.error == c.MEMBER_ID_REQUIRED and first.member_id
    task = join(coord, group, first.member_id, **kwargs)
    await asyncio.sleep(0)  # the request reaches the coordinator
    return task


async def stable_group(coord, group, count, **kwargs):
    """A Stable group of `count` dynamic members; returns their ids, leader first."""
    tasks = [await new_member(coord, group, **kwargs)]
    first = await done(tasks[0])
    ids = [first.member_id]
    assert (await done(coord.sync(group, first.generation_id, first.member_id,
                                  assignments=[(first.member_id, b"a0")]))).error == 0
    for _ in range(1, count):
        task = await new_member(coord, group, **kwargs)
        await asyncio.sleep(0)
        # everyone else learns of the rebalance from a heartbeat and rejoins
        rejoins = []
        for mid in ids:
            gen = coord.groups[group].generation_id
            assert coord.heartbeat(group, gen, mid) == c.REBALANCE_IN_PROGRESS
            rejoins.append(join(coord, group, mid, **kwargs))
        results = [await done(t) for t in [task, *rejoins]]
        ids.append(results[0].member_id)
        leader = results[0].leader
        gen = results[0].generation_id
        assert all(r.generation_id == gen and r.error == 0 for r in results)
        syncs = [asyncio.ensure_future(coord.sync(group, gen, mid)) for mid in ids if mid != leader]
        await asyncio.sleep(0)
        assert (await done(coord.sync(group, gen, leader,
                                      assignments=[(mid, b"a%d" % n) for n, mid in enumerate(ids)]))).error == 0
        for s in syncs:
            assert (await done(s)).error == 0
    assert coord.groups[group].state == c.STABLE
    leader = coord.groups[group].leader_id
    return [leader] + [m for m in ids if m != leader]


async def test_first_join_asks_for_a_member_id_then_forms_generation_one():
    coord = make()
    first = await done(join(coord, "g"))
    assert first.error == c.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-") and first.generation_id == -1
    assert coord.groups["g"].state == c.EMPTY  # a pending member does not start a rebalance

    result = await done(join(coord, "g", first.member_id))
    assert result.error == 0
    assert (result.generation_id, result.leader, result.member_id) == (1, first.member_id, first.member_id)
    assert (result.protocol_type, result.protocol_name) == ("consumer", "range")
    assert result.members == ((first.member_id, None, b"range-meta"),)
    assert coord.groups["g"].state == c.COMPLETING_REBALANCE

    synced = await done(coord.sync("g", 1, first.member_id, protocol_type="consumer", protocol_name="range",
                                   assignments=[(first.member_id, b"assigned")]))
    assert (synced.error, synced.assignment, synced.protocol_name) == (0, b"assigned", "range")
    assert coord.groups["g"].state == c.STABLE
    assert coord.heartbeat("g", 1, first.member_id) == 0


async def test_old_versions_join_without_a_member_id_round_trip():
    coord = make()
    result = await done(join(coord, "g", v4=False))
    assert result.error == 0 and result.generation_id == 1 and result.leader == result.member_id


async def test_second_member_triggers_a_rebalance_that_completes_once_everyone_rejoined():
    coord = make()
    a = (await stable_group(coord, "g", 1))[0]
    b_join = await new_member(coord, "g", rebalance=60_000)
    await asyncio.sleep(0.05)
    assert not b_join.done()  # parked until A rejoins
    assert coord.groups["g"].state == c.PREPARING_REBALANCE
    assert (await done(coord.sync("g", 1, a))).error == c.REBALANCE_IN_PROGRESS
    assert coord.heartbeat("g", 1, a) == c.REBALANCE_IN_PROGRESS

    loop = asyncio.get_running_loop()
    started = loop.time()
    a_join = join(coord, "g", a, rebalance=60_000)
    ra, rb = await done(a_join), await done(b_join)
    assert loop.time() - started < 5  # at once, not after the 60 s rebalance timeout
    assert ra.generation_id == rb.generation_id == 2
    assert ra.leader == rb.leader == a
    assert {m[0] for m in ra.members} == {a, rb.member_id}  # the leader gets the members
    assert rb.members == ()

    # the follower's SyncGroup waits for the leader's assignments
    b_sync = asyncio.ensure_future(coord.sync("g", 2, rb.member_id))
    await asyncio.sleep(0.05)
    assert not b_sync.done()
    await done(coord.sync("g", 2, a, assignments=[(a, b"A"), (rb.member_id, b"B")]))
    assert (await done(b_sync)).assignment == b"B"
    assert coord.groups["g"].state == c.STABLE


async def test_the_leaders_own_join_completes_the_generation_after_answering_the_followers():
    """Kafka answers every member of a generation in one pass; the JoinGroup that completes the
    join phase (here the leader's) goes out after the parked followers', never ahead of them."""
    coord = make()
    leader, *followers = await stable_group(coord, "g", 3)
    newcomer = await new_member(coord, "g")
    order: list[str] = []

    async def rejoin(member_id: str) -> c.JoinResult:
        result = await join(coord, "g", member_id)
        order.append(member_id)
        return result

    parked = [asyncio.ensure_future(rejoin(m)) for m in followers]
    await asyncio.sleep(0)
    newcomer_done = asyncio.ensure_future(newcomer)
    newcomer_done.add_done_callback(lambda t: order.append(t.result().member_id))
    assert not any(t.done() for t in parked)
    results = await done(asyncio.gather(rejoin(leader), *parked, newcomer_done))
    assert {r.generation_id for r in results} == {coord.groups["g"].generation_id}
    assert results[0].leader == leader and results[0].members
    assert order[-1] == leader and len(order) == 4


async def test_followers_sync_before_a_leader_that_syncs_and_rejoins_at_once():
    """librdkafka's cooperative consumers (0113): the leader, answered, syncs, revokes and rejoins
    straight away; each follower syncs as soon as it is answered. Answered first, the followers'
    SyncGroups are parked when the leader's assignments arrive and every member gets its own."""
    coord = make()
    leader, *followers = await stable_group(coord, "g", 3)
    synced: dict[str, c.SyncResult] = {}
    rejoined: list[asyncio.Future] = []

    async def follower(member_id: str, protocols=PROTOCOLS) -> None:
        answer = await join(coord, "g", member_id, protocols=protocols)
        synced[member_id] = await coord.sync("g", answer.generation_id, member_id)

    async def eager_leader() -> None:
        answer = await coord.join("g", leader, protocol_type="consumer", protocols=PROTOCOLS,
                                  session_timeout_ms=SESSION, rebalance_timeout_ms=5_000)
        synced[leader] = await coord.sync("g", answer.generation_id, leader,
                                          assignments=[(m, m.encode()) for m, _, _ in answer.members])
        rejoined.append(join(coord, "g", leader))  # revoked at once: rejoins, starting the next rebalance

    # a follower's new subscription starts the rebalance; the leader rejoins last
    changed = [("range", b"new-subscription"), ("roundrobin", b"new-subscription")]
    rebalance = [asyncio.ensure_future(follower(followers[0], changed))]
    await asyncio.sleep(0)
    rebalance += [asyncio.ensure_future(follower(m)) for m in followers[1:]]
    await asyncio.sleep(0)
    assert coord.groups["g"].state == c.PREPARING_REBALANCE
    await done(asyncio.gather(eager_leader(), *rebalance))
    assert {m: (r.error, r.assignment) for m, r in synced.items()} == {
        m: (0, m.encode()) for m in [leader, *followers]}
    assert coord.groups["g"].state == c.PREPARING_REBALANCE
    rejoined[0].cancel()


async def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed():
    coord = make()
    a, b = await stable_group(coord, "g", 2, rebalance=300, session=5_000)
    c_join = await new_member(coord, "g", rebalance=300, session=5_000)
    a_join = join(coord, "g", a, rebalance=300, session=5_000)
    await asyncio.sleep(0)
    assert coord.heartbeat("g", 2, b) == c.REBALANCE_IN_PROGRESS  # B is alive but does not rejoin
    ra, rc = await done(a_join), await done(c_join)
    assert ra.generation_id == rc.generation_id == 3
    assert {m[0] for m in ra.members} == {a, rc.member_id}
    assert coord.heartbeat("g", 3, b) == c.UNKNOWN_MEMBER_ID


async def test_a_member_whose_session_expires_is_removed_and_the_group_rebalances():
    coord = make()
    a, b = await stable_group(coord, "g", 2)
    group = coord.groups["g"]
    deadline = asyncio.get_running_loop().time() + GUARD
    # A keeps heartbeating, B is silent
    while b in group.members:
        assert asyncio.get_running_loop().time() < deadline
        assert coord.heartbeat("g", group.generation_id, a) in (0, c.REBALANCE_IN_PROGRESS)
        await asyncio.sleep(SESSION / 4000)
    assert group.state == c.PREPARING_REBALANCE
    assert coord.heartbeat("g", 2, a) == c.REBALANCE_IN_PROGRESS
    result = await done(join(coord, "g", a))
    assert result.generation_id == 3 and [m[0] for m in result.members] == [a]


async def test_a_member_parked_in_join_is_not_expired_by_its_session_timeout():
    coord = make()
    a, b = await stable_group(coord, "g", 2, rebalance=1_500)
    c_join = await new_member(coord, "g", rebalance=1_500)
    a_join = join(coord, "g", a, rebalance=1_500)  # A rejoins and waits; B heartbeats but does not rejoin
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not a_join.done():
        assert loop.time() - started < GUARD
        coord.heartbeat("g", 2, b)
        await asyncio.sleep(0.1)
    waited = loop.time() - started
    result = await done(a_join)
    assert waited > 2 * SESSION / 1000  # parked past its own session timeout, yet still a member
    assert result.error == 0 and {m[0] for m in result.members} == {a, (await done(c_join)).member_id}


async def test_leave_group_removes_the_member_at_once():
    coord = make()
    a, b = await stable_group(coord, "g", 2, rebalance=60_000)
    error, results = coord.leave("g", [(b, None, "closing")])
    assert (error, results) == (0, [(b, None, 0)])
    assert coord.groups["g"].state == c.PREPARING_REBALANCE
    result = await done(join(coord, "g", a, rebalance=60_000))  # completes without waiting for B
    assert result.generation_id == 3 and [m[0] for m in result.members] == [a]
    # the last member leaving empties the group
    await done(coord.sync("g", 3, a, assignments=[(a, b"all")]))
    assert coord.leave("g", [(a, None, None)]) == (0, [(a, None, 0)])
    assert coord.groups["g"].state == c.EMPTY
    assert coord.leave("g", [("nobody", None, None)]) == (0, [("nobody", None, c.UNKNOWN_MEMBER_ID)])
    assert coord.leave("other", [("x", None, None)]) == (0, [("x", None, c.UNKNOWN_MEMBER_ID)])


async def test_leader_leaving_hands_leadership_to_a_rejoined_member():
    coord = make()
    a, b = await stable_group(coord, "g", 2, rebalance=60_000)
    coord.leave("g", [(a, None, None)])
    result = await done(join(coord, "g", b, rebalance=60_000))
    assert result.leader == b and [m[0] for m in result.members] == [b]


async def test_initial_rebalance_delay_gathers_members_into_one_generation():
    coord = make(initial_rebalance_delay_ms=300)
    a = await new_member(coord, "g", rebalance=5_000)
    await asyncio.sleep(0.1)
    b = await new_member(coord, "g", rebalance=5_000)
    ra, rb = await done(a), await done(b)
    assert ra.generation_id == rb.generation_id == 1
    assert len(ra.members or rb.members) == 2


async def test_initial_rebalance_delay_is_bounded_by_the_rebalance_timeout():
    coord = make(initial_rebalance_delay_ms=200)
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = await new_member(coord, "g", rebalance=500)
    for _ in range(6):  # members keep arriving; the delay stops being extended at the timeout
        await asyncio.sleep(0.15)
        if not first.done():
            await new_member(coord, "g", rebalance=500)
    result = await done(first)
    assert result.error == 0 and result.generation_id == 1
    assert loop.time() - started < 2.0


async def test_request_errors_as_kafka():
    coord = make()
    assert (await done(join(coord, "g", session=5))).error == c.INVALID_SESSION_TIMEOUT
    assert (await done(join(coord, "g", session=120_000))).error == c.INVALID_SESSION_TIMEOUT
    assert (await done(join(coord, "", v4=False))).error == c.INVALID_GROUP_ID
    assert (await done(join(coord, "nogroup", "some-member"))).error == c.UNKNOWN_MEMBER_ID
    (a,) = await stable_group(coord, "g", 1)
    assert (await done(join(coord, "g", "stranger"))).error == c.UNKNOWN_MEMBER_ID
    assert (await done(join(coord, "g", protocol_type="connect", v4=False))).error == \
        c.INCONSISTENT_GROUP_PROTOCOL
    assert (await done(join(coord, "g", protocols=[("sticky", b"")], v4=False))).error == \
        c.INCONSISTENT_GROUP_PROTOCOL
    assert coord.heartbeat("g", 7, a) == c.ILLEGAL_GENERATION
    assert coord.heartbeat("g", 1, "stranger") == c.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("nogroup", 1, a) == c.UNKNOWN_MEMBER_ID
    assert (await done(coord.sync("g", 7, a))).error == c.ILLEGAL_GENERATION
    assert (await done(coord.sync("g", 1, "stranger"))).error == c.UNKNOWN_MEMBER_ID
    assert (await done(coord.sync("nogroup", 1, a))).error == c.UNKNOWN_MEMBER_ID
    assert (await done(coord.sync("g", 1, a, protocol_name="roundrobin"))).error == \
        c.INCONSISTENT_GROUP_PROTOCOL
    stable = await done(coord.sync("g", 1, a))  # a Stable group answers with the assignment
    assert (stable.error, stable.assignment) == (0, b"a0")


async def test_protocol_is_chosen_by_vote_among_the_common_ones():
    coord = make()
    a = await done(join(coord, "g", protocols=[("range", b"1"), ("roundrobin", b"2")], v4=False))
    await done(coord.sync("g", 1, a.member_id))
    b = join(coord, "g", protocols=[("roundrobin", b"3"), ("range", b"4"), ("sticky", b"5")], v4=False)
    c2 = join(coord, "g", protocols=[("roundrobin", b"6")], v4=False)
    await asyncio.sleep(0)
    ra = await done(join(coord, "g", a.member_id, protocols=[("range", b"1"), ("roundrobin", b"2")]))
    assert ra.protocol_name == "roundrobin"  # two votes against one; "sticky" is not common
    assert sorted(m[2] for m in ra.members) == [b"2", b"3", b"6"]
    await done(b), await done(c2)
    # a member that supports none of the group's protocols is refused
    assert (await done(join(coord, "g", protocols=[("range", b"")], v4=False))).error == \
        c.INCONSISTENT_GROUP_PROTOCOL


async def test_group_max_size():
    coord = make(max_size=1)
    (a,) = await stable_group(coord, "g", 1)
    assert (await done(join(coord, "g"))).error == c.GROUP_MAX_SIZE_REACHED
    assert (await done(join(coord, "g", a))).error == 0  # members are welcome


async def test_static_member_rejoining_keeps_its_assignment_without_a_rebalance():
    coord = make()
    a = await done(join(coord, "g", instance="i-a"))  # static: no MEMBER_ID_REQUIRED
    assert a.error == 0 and a.member_id.startswith("i-a-")
    await done(coord.sync("g", 1, a.member_id, group_instance_id="i-a", assignments=[(a.member_id, b"A")]))
    b = join(coord, "g", instance="i-b")
    ra = await done(join(coord, "g", a.member_id, instance="i-a"))
    rb = await done(b)
    assert ra.generation_id == rb.generation_id == 2
    await done(coord.sync("g", 2, a.member_id, group_instance_id="i-a",
                          assignments=[(a.member_id, b"A2"), (rb.member_id, b"B2")]))

    # i-b restarts: same instance id, empty member id -> a new member id, same generation
    again = await done(join(coord, "g", instance="i-b"))
    assert again.error == 0 and again.member_id != rb.member_id
    assert again.generation_id == 2 and again.leader == a.member_id
    assert coord.groups["g"].state == c.STABLE
    synced = await done(coord.sync("g", 2, again.member_id, group_instance_id="i-b"))
    assert synced.assignment == b"B2"
    # the old incarnation is fenced
    assert coord.heartbeat("g", 2, rb.member_id, "i-b") == c.FENCED_INSTANCE_ID
    assert coord.heartbeat("g", 2, again.member_id, "i-b") == 0
    # leaving by group instance id
    assert coord.leave("g", [("", "i-b", None)]) == (0, [("", "i-b", 0)])
    assert coord.groups["g"].state == c.PREPARING_REBALANCE


async def test_static_members_are_not_dropped_for_missing_a_rebalance():
    coord = make()
    a = await done(join(coord, "g", instance="i-a", rebalance=300, session=5_000))
    await done(coord.sync("g", 1, a.member_id, group_instance_id="i-a"))
    b = join(coord, "g", instance="i-b", rebalance=300, session=5_000)
    rb = await done(b)  # A does not rejoin; after the rebalance timeout the generation goes on
    assert rb.generation_id == 2
    assert set(coord.groups["g"].members) == {a.member_id, rb.member_id}


async def test_pending_member_expires_and_lets_the_rebalance_complete():
    coord = make()
    a, b = await stable_group(coord, "g", 2, rebalance=60_000)
    pending = await done(join(coord, "g"))
    assert pending.error == c.MEMBER_ID_REQUIRED
    coord.leave("g", [(b, None, None)])
    a_join = join(coord, "g", a, rebalance=60_000)
    await asyncio.sleep(0.05)
    assert not a_join.done()  # waits for the member that was handed an id
    result = await done(a_join)  # ... until its session timeout passes
    assert [m[0] for m in result.members] == [a]
    assert pending.member_id not in coord.groups["g"].pending_members


async def test_members_that_do_not_sync_in_time_are_removed():
    coord = make()
    a, b = await stable_group(coord, "g", 2, rebalance=300, session=5_000)
    c_join = await new_member(coord, "g", rebalance=300, session=5_000)
    a_join, b_join = join(coord, "g", a, rebalance=300, session=5_000), \
        join(coord, "g", b, rebalance=300, session=5_000)
    ra, rb, rc = await done(a_join), await done(b_join), await done(c_join)
    assert ra.generation_id == rb.generation_id == rc.generation_id == 3
    # only the leader syncs; the followers never do: they are removed after the timeout
    await done(coord.sync("g", 3, ra.leader, assignments=[]))
    group = coord.groups["g"]
    deadline = asyncio.get_running_loop().time() + GUARD
    while len(group.members) > 1:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    assert list(group.members) == [ra.leader]
    assert group.state == c.PREPARING_REBALANCE


async def test_close_answers_parked_requests_and_refuses_new_ones():
    coord = make()
    a, = await stable_group(coord, "g", 1)
    b_join = await new_member(coord, "g")
    await asyncio.sleep(0)
    coord.close()
    assert (await done(b_join)).error == c.NOT_COORDINATOR
    assert (await done(join(coord, "g", a))).error == c.NOT_COORDINATOR
    assert (await done(coord.sync("g", 1, a))).error == c.NOT_COORDINATOR


async def test_offset_commit_validation():
    coord = make()
    assert coord.validate_offset_commit("solo", "", None, -1) == 0  # simple commit, no group
    assert coord.validate_offset_commit("solo", "m", None, 3) == c.ILLEGAL_GENERATION
    assert coord.validate_offset_commit("solo", "m", None, 3, api_version=9) == c.GROUP_ID_NOT_FOUND
    assert coord.validate_offset_commit("", "", None, -1) == c.INVALID_GROUP_ID
    a, b = await stable_group(coord, "g", 2, rebalance=60_000)
    assert coord.validate_offset_commit("g", a, None, 2) == 0
    assert coord.validate_offset_commit("g", a, None, 1) == c.ILLEGAL_GENERATION
    assert coord.validate_offset_commit("g", "stranger", None, 2) == c.UNKNOWN_MEMBER_ID
    assert coord.validate_offset_commit("g", "", None, -1) == c.UNKNOWN_MEMBER_ID  # not while active
    c_join = await new_member(coord, "g", rebalance=60_000)
    assert coord.validate_offset_commit("g", a, None, 2) == 0  # PreparingRebalance still commits
    joins = [join(coord, "g", a, rebalance=60_000), join(coord, "g", b, rebalance=60_000)]
    await done(c_join), [await done(j) for j in joins]
    assert coord.validate_offset_commit("g", a, None, 3) == c.REBALANCE_IN_PROGRESS  # CompletingRebalance


async def test_list_and_describe():
    coord = make()
    a, b = await stable_group(coord, "g", 2)
    listed = coord.list_groups(["g", "offsets-only"])
    assert listed == [("g", "consumer", c.STABLE, "classic"), ("offsets-only", "", c.EMPTY, "classic")]
    assert coord.list_groups(["offsets-only"], states=["stable"]) == [("g", "consumer", c.STABLE, "classic")]
    assert coord.list_groups([], types=["consumer"]) == []
    described = coord.describe("g")
    assert (described.state, described.protocol_type, described.protocol_data) == (c.STABLE, "consumer", "range")
    assert [(m.member_id, m.assignment, m.metadata, m.client_host) for m in described.members] == \
        [(a, b"a0", b"range-meta", "/127.0.0.1"), (b, b"a1", b"range-meta", "/127.0.0.1")]
    assert coord.describe("missing").error == c.GROUP_ID_NOT_FOUND
    assert coord.describe("missing", has_offsets=True).state == c.EMPTY
    assert coord.validate_delete("g", True) == c.NON_EMPTY_GROUP
