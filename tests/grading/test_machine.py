"""The machine a grading ran on (engine/grading/machine.py): two machines that share a host
name, or one machine rebooted, get two names; a name never holds the slot separator."""

from __future__ import annotations

import socket

from engine.grading.machine import BOOT_ID, machine_name, name_of


def test_two_machines_called_vm_are_told_apart_by_their_boot_ids() -> None:
    first = name_of("vm", "3f2a91c0-1111-4a2b-8c3d-000000000001")
    second = name_of("vm", "77e01b2d-2222-4a2b-8c3d-000000000002")
    assert first == "vm#3f2a91c0" and second == "vm#77e01b2d" and first != second


def test_a_name_never_holds_the_slot_separator_and_falls_back_to_the_host() -> None:
    assert ":" not in name_of("odd:host", "abc")
    assert name_of("vm", "") == "vm"  # no boot id readable: the host name alone
    assert name_of("", "") == "localhost"


def test_this_machines_name_is_its_host_and_boot_id() -> None:
    boot = BOOT_ID.read_text().strip()
    assert machine_name() == f"{socket.gethostname()}#{boot.replace('-', '')[:8]}"
