"""The NPC state machine: each intent moves an NPC through the states it promises."""

from __future__ import annotations

import math

from rtgate.apps.npc.intent import Intent
from rtgate.apps.npc.world import NPC, PLACES_XY, Mode, World, default_world


def run(world: World, frames: int) -> None:
    for _ in range(frames):
        world.step()


def mode(npc: NPC) -> Mode:
    """The NPC's state, read fresh (keeps mypy from narrowing across world steps)."""
    return npc.mode


def one_npc() -> tuple[World, NPC]:
    npc = NPC("Mara", home=PLACES_XY["forge"], x=5.0, y=5.0)
    return World([npc]), npc


def test_walk_goes_to_the_place_then_idles() -> None:
    world, npc = one_npc()
    world.apply("Mara", Intent("walk", "well", "See you there."))
    assert mode(npc) is Mode.WALK and npc.speech == "See you there."
    run(world, 60 * 4)  # 7.1 units at 3 units/s
    assert mode(npc) is Mode.IDLE
    assert math.hypot(npc.x, npc.y) <= 0.25
    assert [(a, b) for _, a, b in npc.history] == [(Mode.IDLE, Mode.WALK), (Mode.WALK, Mode.IDLE)]


def test_work_walks_home_then_works() -> None:
    world, npc = one_npc()
    world.apply("Mara", Intent("work", "home", ""))
    assert mode(npc) is Mode.WALK
    run(world, 60 * 6)
    assert mode(npc) is Mode.WORK
    assert math.hypot(npc.x - PLACES_XY["forge"][0], npc.y - PLACES_XY["forge"][1]) <= 0.25


def test_talk_ends_when_the_line_is_spoken() -> None:
    world, npc = one_npc()
    world.apply("Mara", Intent("talk", "player", "Well met."))
    assert mode(npc) is Mode.TALK and npc.speech_left > 0
    run(world, npc.speech_left)
    assert mode(npc) is Mode.IDLE and npc.speech == ""


def test_follow_keeps_near_the_walking_player() -> None:
    world, npc = one_npc()
    world.apply("Mara", Intent("follow", "player", "Lead on."))
    run(world, 60 * 10)
    assert mode(npc) is Mode.FOLLOW
    px, py = world.player
    assert math.hypot(px - npc.x, py - npc.y) <= 2.0


def test_flee_runs_twice_as_fast_as_walking() -> None:
    w1, walker = one_npc()
    w2, runner = one_npc()
    w1.apply("Mara", Intent("walk", "gate", ""))
    w2.apply("Mara", Intent("flee", "gate", ""))
    run(w1, 60)
    run(w2, 60)
    start = math.hypot(5.0 - 0.0, 5.0 + 12.0)
    gate = PLACES_XY["gate"]
    walked = start - math.hypot(walker.x - gate[0], walker.y - gate[1])
    ran = start - math.hypot(runner.x - gate[0], runner.y - gate[1])
    assert math.isclose(ran, 2 * walked, rel_tol=1e-6)
    assert mode(runner) is Mode.FLEE


def test_a_deeper_line_changes_speech_not_course() -> None:
    world, npc = one_npc()
    world.apply("Mara", Intent("walk", "market", "On my way."))
    deeper = Intent("idle", "player", "The market smells of rain today.")
    world.apply("Mara", deeper, act=False)
    assert mode(npc) is Mode.WALK and npc.goal == "market"
    assert npc.speech == "The market smells of rain today."
    assert (npc.intents, npc.lines) == (1, 2)


def test_head_first_acts_then_the_line_is_spoken() -> None:
    world, npc = one_npc()
    world.apply("Mara", Intent("talk", "player", ""), speak=False)  # the head streamed in
    assert mode(npc) is Mode.TALK and npc.speech == ""
    run(world, 30)
    assert mode(npc) is Mode.TALK  # still waiting for its line
    world.apply("Mara", Intent("talk", "player", "Well met."), act=False)
    assert npc.speech == "Well met."
    run(world, npc.speech_left)
    assert mode(npc) is Mode.IDLE


def test_talk_without_a_line_gives_up() -> None:
    world, npc = one_npc()
    world.apply("Mara", Intent("talk", "player", ""), speak=False)
    run(world, 3 * 60 + 2)
    assert mode(npc) is Mode.IDLE


def test_idle_intent_stops_an_npc() -> None:
    world, npc = one_npc()
    world.apply("Mara", Intent("follow", "player", ""))
    world.apply("Mara", Intent("idle", "player", "I'll wait."))
    x, y = npc.x, npc.y
    run(world, 60)
    assert mode(npc) is Mode.IDLE and (npc.x, npc.y) == (x, y)


def test_default_world_has_three_villagers() -> None:
    world = default_world()
    assert sorted(world.npcs) == ["Elda", "Mara", "Tom"]
    assert all(s["mode"] == "idle" for s in world.snapshot())
