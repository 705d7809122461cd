"""The steps of the client jobs (client_wrapper_job.py, package_client_job.py): each client is driven through the same
collectives, and every result is checked against the value it must have.

Each step, on float32 host buffers of N elements (N a multiple of the world size): all-reduce (sum), broadcast (root =
step % world), all-gather, reduce-scatter (sum), reduce (sum, root 0), and a ring send/recv in a group.
`client` has all_reduce(send, recv, count), broadcast(send, recv, count, root), all_gather(send, recv, count),
reduce_scatter(send, recv, count), reduce(send, recv, count, root) and exchange(send, recv, count, to, source)
(send/recv in a group), buffers as addresses. A faulty step (--fault half-count on its rank) all-reduces N/2 elements:
a count mismatch. A wrong result exits 3 with "test program: WHAT failed (STEP)" on stderr, as the other jobs.
"""

import ctypes
import sys

import nccl_ctypes as nc


def expect(buffer, value, what, step, first=0, count=None):
    count = len(buffer) - first if count is None else count
    for i in range(first, first + count):
        if buffer[i] != value:
            sys.stderr.write("%s: element %d is %r, not %r\n" % (what, i, buffer[i], value))
            nc.fail(what, step)


def run(client, options, world, rank, recv=None):
    """Runs options["steps"] steps of options["count"] elements; returns the digest of what was received. `recv`: the
    buffer the collectives receive into (a registered window, say), count floats; a new one when None."""
    count = options["count"]
    chunk = count // world
    send = (ctypes.c_float * count)()
    recv = (ctypes.c_float * count)() if recv is None else recv
    small = (ctypes.c_float * chunk)()
    peer_in = (ctypes.c_float * chunk)()
    address = ctypes.addressof
    h = nc.FNV_OFFSET
    for step in range(options["steps"]):
        faulty = options["fault"] == "half-count" and rank == options["rank"] and step == options["step"]
        send[:] = [float((rank + 1) * (step + 1))] * count
        n = count // 2 if faulty else count
        client.all_reduce(address(send), address(recv), n)
        expect(recv, float((step + 1) * world * (world + 1) // 2), "all-reduce", step, 0, n)
        h = nc.digest(recv, h)

        root = step % world
        send[:] = [float(100 + step) if rank == root else 0.0] * count
        client.broadcast(address(send), address(recv), count, root)
        expect(recv, float(100 + step), "broadcast", step)

        small[:] = [float(rank + step)] * chunk
        client.all_gather(address(small), address(recv), chunk)
        for r in range(world):
            expect(recv, float(r + step), "all-gather", step, r * chunk, chunk)
        h = nc.digest(recv, h)

        send[:] = [float(rank + 1)] * count
        client.reduce_scatter(address(send), address(small), chunk)
        expect(small, float(world * (world + 1) // 2), "reduce-scatter", step)

        send[:] = [float(rank)] * count
        client.reduce(address(send), address(recv), count, 0)
        if rank == 0:
            expect(recv, float(world * (world - 1) // 2), "reduce", step)

        small[:] = [float(rank * 10 + step)] * chunk
        client.exchange(address(small), address(peer_in), chunk, (rank + 1) % world, (rank - 1) % world)
        expect(peer_in, float(((rank - 1) % world) * 10 + step), "send/recv", step)
        h = nc.digest(peer_in, h)
    return h
