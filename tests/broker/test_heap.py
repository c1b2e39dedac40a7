"""broker/net/heap.py: the broker's glibc heap settings."""

from __future__ import annotations

import platform

import pytest

from broker.net.heap import keep_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the settings exist only with glibc")
def test_glibc_takes_the_settings_and_takes_them_again():
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # run_broker in a process that already set them


@pytest.mark.skipif(platform.libc_ver()[0] == "glibc", reason="elsewhere nothing changes")
def test_without_glibc_nothing_changes():
    assert keep_freed_memory() is False
