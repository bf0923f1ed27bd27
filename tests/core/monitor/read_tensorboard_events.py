#!/usr/bin/python3
"""Reads a TensorBoard event file with nothing from this repository.

An independent check of core/monitor/tensorboard_writer: the TFRecord framing
and the protobuf wire format are decoded here by hand, from TensorFlow's
definitions (tensorflow/core/lib/io/record_writer.cc, event.proto,
summary.proto), and the checksums computed by Debian's python3-crc32c (hence
/usr/bin/python3: a python3 elsewhere on PATH may lack it).

Usage: read_tensorboard_events.py FILE

Prints one JSON object a line, in file order: for an event with a
file_version
  {"wall_time": "1700000000.25", "step": 0, "file_version": "brain.Event:2"}
and for each value of an event's summary
  {"wall_time": "1700000001.5", "step": 3, "tag": "loss",
   "value": "0.5", "value_bits": "3f000000"}
Floats are repr() strings, which round-trip exactly (nan and inf included);
value_bits is the float32's bit pattern, "value" null when the value holds
no simple_value. Exits 1 at the first record that is torn, fails a checksum
or is not a valid encoding, naming its offset; 2 on a usage error.
"""
import json
import struct
import sys

import crc32c

HEADER_BYTES = 12  # uint64 length + uint32 masked CRC of it
FOOTER_BYTES = 4  # uint32 masked CRC of the data

# Wire types (protobuf encoding).
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


class Corrupt(Exception):
    pass


def masked_crc(data):
    crc = crc32c.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(data):
    """Yields (offset, record data) for each record, checking both CRCs."""
    offset = 0
    while offset < len(data):
        if len(data) - offset < HEADER_BYTES:
            raise Corrupt(f"record at offset {offset}: torn header")
        length_bytes = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack_from("<I", data, offset + 8)
        if masked_crc(length_bytes) != length_crc:
            raise Corrupt(f"record at offset {offset}: length checksum mismatch")
        start = offset + HEADER_BYTES
        end = start + length + FOOTER_BYTES
        if end > len(data):
            raise Corrupt(f"record at offset {offset}: torn, {length} data bytes declared")
        body = data[start:start + length]
        (data_crc,) = struct.unpack_from("<I", data, start + length)
        if masked_crc(body) != data_crc:
            raise Corrupt(f"record at offset {offset}: data checksum mismatch")
        yield offset, body
        offset = end


def read_varint(data, pos):
    value = shift = 0
    while True:
        if pos >= len(data):
            raise Corrupt("torn varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise Corrupt("varint longer than 10 bytes")


def take(data, pos, count):
    if pos + count > len(data):
        raise Corrupt("field runs past the end of its message")
    return data[pos:pos + count], pos + count


def fields(message):
    """Yields (field number, wire type, value): an int for a varint, bytes
    otherwise."""
    pos = 0
    while pos < len(message):
        key, pos = read_varint(message, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise Corrupt("field number 0")
        if wire_type == VARINT:
            value, pos = read_varint(message, pos)
        elif wire_type == FIXED64:
            value, pos = take(message, pos, 8)
        elif wire_type == LENGTH_DELIMITED:
            length, pos = read_varint(message, pos)
            value, pos = take(message, pos, length)
        elif wire_type == FIXED32:
            value, pos = take(message, pos, 4)
        else:  # groups (3, 4) are not in these messages; 6 and 7 do not exist
            raise Corrupt(f"wire type {wire_type} in field {number}")
        yield number, wire_type, value


def expect(number, wire_type, wanted):
    if wire_type != wanted:
        raise Corrupt(f"field {number} has wire type {wire_type}, not {wanted}")


def int64(varint):
    # Negative int64s are 10-byte varints of their two's complement.
    varint &= (1 << 64) - 1
    return varint - (1 << 64) if varint >= 1 << 63 else varint


def text(raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Corrupt(f"string is not UTF-8: {error}")


def summary_value(message):
    """Summary.Value: string tag = 1; float simple_value = 2 (in a oneof)."""
    value = {"tag": "", "value": None}
    for number, wire_type, raw in fields(message):
        if number == 1:
            expect(number, wire_type, LENGTH_DELIMITED)
            value["tag"] = text(raw)
        elif number == 2:
            expect(number, wire_type, FIXED32)
            value["value"] = repr(struct.unpack("<f", raw)[0])
            value["value_bits"] = raw[::-1].hex()
    return value


def event_lines(message):
    """Event: double wall_time = 1; int64 step = 2; oneof what {
    string file_version = 3; Summary summary = 5; }. Summary: repeated
    Value value = 1."""
    wall_time, step, file_version, values = 0.0, 0, None, []
    for number, wire_type, raw in fields(message):
        if number == 1:
            expect(number, wire_type, FIXED64)
            (wall_time,) = struct.unpack("<d", raw)
        elif number == 2:
            expect(number, wire_type, VARINT)
            step = int64(raw)
        elif number == 3:
            expect(number, wire_type, LENGTH_DELIMITED)
            file_version = text(raw)
        elif number == 5:
            expect(number, wire_type, LENGTH_DELIMITED)
            for value_number, value_wire_type, value_raw in fields(raw):
                if value_number == 1:
                    expect(value_number, value_wire_type, LENGTH_DELIMITED)
                    values.append(summary_value(value_raw))
    stamp = {"wall_time": repr(wall_time), "step": step}
    lines = []
    if file_version is not None:
        lines.append({**stamp, "file_version": file_version})
    lines.extend({**stamp, **value} for value in values)
    return lines


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], "rb") as file:
        data = file.read()
    try:
        for offset, body in records(data):
            try:
                lines = event_lines(body)
            except Corrupt as error:
                raise Corrupt(f"record at offset {offset}: {error}")
            for line in lines:
                print(json.dumps(line))
    except Corrupt as error:
        print(f"{argv[1]}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
