#!/usr/bin/env python3
# A TCP listener on 127.0.0.1 relaying each connection to a Unix socket,
# for MCP clients that speak only http:// (the conformance suite) to
# sbxd's socket, where the file mode is the authentication.
# Usage: unix_relay.py SOCKET; prints "port N", relays until killed.
import asyncio
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            writer.close()


async def main(path):
    async def relay(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(path)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        writer.close()
        up_writer.close()

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main(sys.argv[1]))
