"""The ``submit`` command placed in every sandbox, and the mailbox layout it shares with the engine.

The sandbox needs no network: ``submit`` copies the file into the mailbox's ``outbox`` (atomic
rename), then waits for ``inbox/<id>.json``, which the engine writes through Harbor's
environment API (exec/upload/download), so the same mailbox works for local, Docker and
cloud sandboxes. Files that are missing, not regular files, not UTF-8 text or larger than the
limit are refused on the spot and recorded in ``rejected/`` for the engine to log.
"""

from __future__ import annotations

MAILBOX = "/mkb/mailbox"
OUTBOX = f"{MAILBOX}/outbox"
INBOX = f"{MAILBOX}/inbox"
REJECTED = f"{MAILBOX}/rejected"
TAKEN = f"{MAILBOX}/taken"
SUBMIT_PATH = "bin/submit"  # relative to the task's workdir

SUBMIT_SCRIPT = r'''#!/usr/bin/env python3
"""submit [FILE]: send FILE (default solution.py) for grading and print the feedback."""
import json
import os
import sys
import time
import uuid

MAILBOX = os.environ.get("MKB_MAILBOX", "__MAILBOX__")
MAX_BYTES = __MAX_BYTES__


def record_rejection(sub_id, reason, detail):
    folder = os.path.join(MAILBOX, "rejected")
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, sub_id + ".tmp")
    with open(tmp, "w") as fh:
        json.dump({"id": sub_id, "reason": reason, "detail": detail, "at": time.time()}, fh)
    os.replace(tmp, os.path.join(folder, sub_id + ".json"))


def refuse(sub_id, reason, detail):
    record_rejection(sub_id, reason, detail)
    print("submit: refused: " + detail, file=sys.stderr)
    sys.exit(2)


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1] in ("-h", "--help")):
        print("usage: submit [FILE]   (default: solution.py)")
        return 0 if len(argv) == 2 else 2
    path = argv[1] if len(argv) == 2 else "solution.py"
    sub_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    if not os.path.lexists(path):
        refuse(sub_id, "missing", "no such file: " + path)
    if os.path.islink(path) or not os.path.isfile(path):
        refuse(sub_id, "not_a_file", path + " is not a regular file")
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        refuse(sub_id, "too_large", "%s has %d bytes; the limit is %d" % (path, size, MAX_BYTES))
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        refuse(sub_id, "too_large", "%s grew past %d bytes while reading" % (path, MAX_BYTES))
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        refuse(sub_id, "not_text", path + " is not UTF-8 text")
    outbox = os.path.join(MAILBOX, "outbox")
    os.makedirs(outbox, exist_ok=True)
    tmp = os.path.join(outbox, sub_id + ".part")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, os.path.join(outbox, sub_id + ".py"))
    print("Submitted %s (%d bytes) as %s. Waiting for feedback; the wait counts against "
          "your time." % (path, len(data), sub_id), flush=True)
    answer = os.path.join(MAILBOX, "inbox", sub_id + ".json")
    started = last_note = time.time()
    while not os.path.exists(answer):
        time.sleep(0.5)
        if time.time() - last_note >= 30:
            last_note = time.time()
            print("... still waiting for feedback (%d s)" % (last_note - started), flush=True)
    with open(answer) as fh:
        reply = json.load(fh)
    print(reply.get("text", ""), flush=True)
    status = reply.get("status")
    if status == "refused":
        return 3
    return 0 if reply.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''


def render_submit_script(max_bytes: int) -> str:
    return SUBMIT_SCRIPT.replace("__MAILBOX__", MAILBOX).replace("__MAX_BYTES__", str(max_bytes))
