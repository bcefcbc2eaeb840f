#!/usr/bin/python3
"""Independent reader of TensorBoard event files (TFRecord framing + Event protobuf), written from the
format documentation, to check cairn's writer without TensorFlow. Prints one JSON object per event:
{"wall_time", "step", "file_version"?, "session_log"?: {"status", "msg"?}, "scalars": {tag: value},
"texts"?: {tag: markdown}}; exits 1 on
any framing/CRC error. Uses TensorBoard's own reader too when --tensorboard is given and it is installed.

read_tfevents.py --run DIR: the scalar events TensorBoard shows for a run directory: every events.out.tfevents.*
file in name order (TensorBoard's order), a SessionLog START at step s dropping the events read before it whose
step is >= s (event_accumulator's purge), START events themselves left out. With --tensorboard and TensorBoard
installed, its EventAccumulator must show the same steps and values for every tag."""
import json
import struct
import sys


def _crc32c_table():
    poly = 0x82F63B78  # 0x1EDC6F41 reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def fields(buf):
    """Yields (field number, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v = buf[i:i + 8]
            i += 8
        elif wire == 2:
            n, i = varint(buf, i)
            v = buf[i:i + n]
            i += n
        elif wire == 5:
            v = buf[i:i + 4]
            i += 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield field, wire, v


def decode_event(buf):
    ev = {"scalars": {}}
    for f, w, v in fields(buf):
        if f == 1 and w == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif f == 2 and w == 0:
            ev["step"] = v
        elif f == 3 and w == 2:
            ev["file_version"] = v.decode()
        elif f == 7 and w == 2:  # SessionLog { SessionStatus status = 1; string checkpoint_path = 2; string msg = 3; }
            log = {"status": "STATUS_UNSPECIFIED"}
            for lf, lw, lv in fields(v):
                if lf == 1 and lw == 0:
                    log["status"] = {0: "STATUS_UNSPECIFIED", 1: "START", 2: "STOP", 3: "CHECKPOINT"}.get(lv, lv)
                elif lf == 3 and lw == 2:
                    log["msg"] = lv.decode()
            ev["session_log"] = log
        elif f == 5 and w == 2:
            for sf, sw, sv in fields(v):
                if sf != 1:
                    continue
                tag, val, text, plugin = None, None, None, None
                for vf, vw, vv in fields(sv):
                    if vf == 1:
                        tag = vv.decode()
                    elif vf == 2 and vw == 5:
                        val = struct.unpack("<f", vv)[0]
                    elif vf == 8 and vw == 2:  # TensorProto { DataType dtype = 1; repeated bytes string_val = 8; }
                        for tf, tw, tv in fields(vv):
                            if tf == 1 and tw == 0 and tv != 7:
                                raise ValueError("tensor summary of dtype %d, not DT_STRING" % tv)
                            if tf == 8 and tw == 2:
                                text = tv.decode()
                    elif vf == 9 and vw == 2:  # SummaryMetadata { PluginData plugin_data = 1 { plugin_name = 1 } }
                        for mf, mw, mv in fields(vv):
                            if mf == 1 and mw == 2:
                                plugin = dict((pf, pv) for pf, _, pv in fields(mv)).get(1, b"").decode()
                if text is not None:
                    if plugin != "text":
                        raise ValueError("string tensor %r without the text plugin's metadata" % tag)
                    ev.setdefault("texts", {})[tag] = text
                else:
                    ev["scalars"][tag] = val
    return ev


def read(path):
    data = open(path, "rb").read()
    i, out = 0, []
    while i < len(data):
        if len(data) - i < 12:
            raise ValueError("truncated record header at byte %d" % i)
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[i + 8:i + 12])
        if hcrc != masked(header):
            raise ValueError("length CRC mismatch at byte %d" % i)
        body = data[i + 12:i + 12 + length]
        (bcrc,) = struct.unpack("<I", data[i + 12 + length:i + 16 + length])
        if len(body) != length or bcrc != masked(body):
            raise ValueError("data CRC mismatch at byte %d" % i)
        out.append(decode_event(body))
        i += 16 + length
    return out


def read_run(directory):
    """The scalar events TensorBoard keeps for a run directory, in reading order (see the module doc)."""
    import glob
    import os
    kept = []
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for ev in read(path):
            if ev.get("session_log", {}).get("status") == "START":
                kept = [k for k in kept if k["step"] < ev["step"]]
            elif ev["scalars"]:
                kept.append(ev)
    return kept


def check_with_tensorboard(directory, kept):
    """1 when TensorBoard's EventAccumulator shows other scalars than `kept`, 0 otherwise (or without it)."""
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("tensorboard not installed: skipped its reader", file=sys.stderr)
        return 0
    acc = event_accumulator.EventAccumulator(directory, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    ours = {}
    for ev in kept:
        for tag, value in ev["scalars"].items():
            ours.setdefault(tag, []).append((ev["step"], value))
    theirs = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    if ours != theirs:
        bad = sorted(t for t in set(ours) | set(theirs) if ours.get(t) != theirs.get(t))
        print("tensorboard shows other scalars for %s" % bad, file=sys.stderr)
        return 1
    return 0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    run = "--run" in sys.argv
    try:
        events = read_run(args[0]) if run else read(args[0])
    except (ValueError, IndexError, struct.error) as e:
        print("bad event file: %s" % e, file=sys.stderr)
        return 1
    for ev in events:
        print(json.dumps(ev))
    if run:
        return check_with_tensorboard(args[0], events) if "--tensorboard" in sys.argv else 0
    if "--tensorboard" in sys.argv:
        try:
            from tensorboard.backend.event_processing import event_file_loader
        except ImportError:
            print("tensorboard not installed: skipped its reader", file=sys.stderr)
            return 0
        n = sum(1 for _ in event_file_loader.EventFileLoader(args[0]).Load())
        if n != len(events):
            print("tensorboard read %d events, we read %d" % (n, len(events)), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
