# An allocation-heavy Python program for `make demo`: memprofctl records Debian's python3 running
# it, then reports where the interpreter's native allocations came from. Small objects go through
# pymalloc's arenas (mmap), larger ones through malloc; bytearrays and big strings are malloc'd.
import json
import zlib

cache = []           # grows all along: what a leak looks like in the report


def build_records(n):
    return [{"id": i, "name": "item-%d" % i, "tags": ["t%d" % (i % 7)] * 4} for i in range(n)]


def serialize(records):
    return json.dumps(records)


def compress(text):
    return zlib.compress(text.encode(), 6)


def buffers(n):
    return [bytearray(32 * 1024) for _ in range(n)]


for _ in range(12):
    recs = build_records(20000)
    blob = compress(serialize(recs))
    keep = buffers(64)
    cache.append(bytes(blob))   # kept until exit
print("demo: %d blobs cached, %d bytes" % (len(cache), sum(len(b) for b in cache)))
