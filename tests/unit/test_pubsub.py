"""PubSub (docs/pubsub.md): every subscriber receives every message published after it
subscribed, in order, on every backend; on the local log, several processes publish and
subscribe to one topic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from audit_support import wait_until

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import InvalidArgumentError, InvalidNameError
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.pubsub import PubSub

WAIT = 60.0


class Inbox:
    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, topic: str, message: bytes) -> None:
        assert topic == "cache"
        with self.lock:
            self.messages.append(message)


def test_every_subscriber_gets_every_later_message_in_order(manager: LogManager) -> None:
    with PubSub(manager) as pubsub:
        pubsub.publish("cache", b"before anyone listened")
        first, second = Inbox(), Inbox()
        pubsub.subscribe("cache", first)
        pubsub.subscribe("cache", second)
        sent = [b"invalidate %d" % i for i in range(20)]
        for message in sent:
            pubsub.publish("cache", message)
        wait_until(lambda: len(first.messages) == len(second.messages) == 20, WAIT, "delivery")
        assert first.messages == second.messages == sent
        assert manager.size("pubsub/cache") == 1


def test_a_failing_callback_goes_on_receiving(manager: LogManager) -> None:
    seen: list[bytes] = []

    def flaky(topic: str, message: bytes) -> None:
        seen.append(message)
        if message == b"bad":
            raise ValueError("cannot handle it")

    with PubSub(manager) as pubsub:
        subscription = pubsub.subscribe("cache", flaky)
        for message in (b"one", b"bad", b"two"):
            pubsub.publish("cache", message)
        wait_until(lambda: subscription.received == 3, WAIT, "three deliveries")
        assert seen == [b"one", b"bad", b"two"]


def test_wrong_topics_and_messages_are_refused_with_the_fix(manager: LogManager) -> None:
    with PubSub(manager) as pubsub:
        with pytest.raises(InvalidNameError, match="invalid pubsub topic 'no spaces'"):
            pubsub.publish("no spaces", b"x")
        with pytest.raises(InvalidArgumentError, match="a pubsub message is bytes, got str"):
            pubsub.publish("cache", "text")  # type: ignore[arg-type]
        manager.create("pubsub/wide", 2)
        with pytest.raises(InvalidArgumentError, match="a topic needs one"):
            pubsub.publish("wide", b"x")


CHILD = """
import json, sys, threading
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.manager import LocalLogManager
from streamcore.pubsub import PubSub

root, me, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
manager = LocalLogManager(root + "/log", config=StreamcoreConfig(home=root, log=LogDefaults()))
pubsub = PubSub(manager)
got, done = [], threading.Event()

def receive(topic, message):
    got.append(message.decode())
    if len(got) == total:
        done.set()

pubsub.subscribe("cache", receive)
print("ready", flush=True)
sys.stdin.readline()  # every process subscribed: publish
for i in range(5):
    pubsub.publish("cache", f"{me}-{i}".encode())
done.wait(120)
print(json.dumps(got), flush=True)
pubsub.close()
manager.close()
"""


def test_processes_publishing_and_subscribing_on_the_local_log(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    manager = LocalLogManager(
        tmp_path / "log", config=StreamcoreConfig(home=tmp_path, log=LogDefaults())
    )
    pubsub = PubSub(manager)
    pubsub.publish("cache", b"early")  # before the children subscribed: none receives it
    names = ["a", "b", "c"]
    total = 5 * (len(names) + 1)
    children = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), name, str(total)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        for name in names
    ]
    mine = Inbox()
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        pubsub.subscribe("cache", mine)
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for i in range(5):
            pubsub.publish("cache", f"main-{i}".encode())
        received = []
        for child in children:
            out, _ = child.communicate(timeout=WAIT)
            received.append(json.loads(out))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        pubsub.close()
        manager.close()
    expected = {f"{who}-{i}" for who in [*names, "main"] for i in range(5)}
    assert all(set(got) == expected and len(got) == total for got in received)
    # One order for everyone, each publisher's messages in the order it sent them.
    assert received[0] == received[1] == received[2] == [m.decode() for m in mine.messages]
    for who in [*names, "main"]:
        assert [m for m in received[0] if m.startswith(f"{who}-")] == [
            f"{who}-{i}" for i in range(5)
        ]
