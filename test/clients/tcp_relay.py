#!/usr/bin/python3
"""A loopback TCP relay to the throwaway cluster's Unix socket, for drivers
that speak TCP only (the Elixir client's p1_pgsql).  The cluster listens on
no TCP address (test/lib/cluster.sh); this relay listens on 127.0.0.1 on a
free port, prints the port on stdout, and copies bytes both ways, one
connection per client connection: a backend that ends closes its client's
socket, as a direct connection would.

    tcp_relay.py UNIX_SOCKET_PATH
"""
import asyncio
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def serve(path):
    async def relay(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_unix_connection(path)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(serve(sys.argv[1]))
