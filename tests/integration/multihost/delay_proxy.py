#!/usr/bin/env python3
"""A TCP proxy that delays every byte by a fixed time in each direction: a far-away host for the multi-host test bed.

    delay_proxy.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS

The kernel of the bed has no sch_netem (`tc netem`), so the delay a slow network adds is made here, between one host's
ranks and the coordinator. Bytes keep their order; what arrives at time t leaves at t + DELAY_MS. Loss is not emulated:
a TCP proxy cannot drop bytes without breaking the stream (retransmissions are the kernel's, below it). Prints
"listening" once it accepts connections; runs until killed.
"""
import asyncio
import sys


async def pipe(reader, writer, delay):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(65536)
            await queue.put((loop.time() + delay, data or None))
            if not data:
                break
    except (ConnectionError, OSError):
        await queue.put((loop.time(), None))
    try:
        await sender
    except (ConnectionError, OSError):
        pass


async def main():
    listen_host, listen_port, target_host, target_port, delay_ms = sys.argv[1:6]
    delay = int(delay_ms) / 1000.0

    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, int(target_port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer, delay), pipe(server_reader, client_writer, delay))

    server = await asyncio.start_server(handle, listen_host, int(listen_port))
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
