#!/usr/bin/python3
"""A loopback TCP relay to the throwaway cluster's Unix socket, for drivers
that speak TCP only (the Elixir client's p1_pgsql) and for the fast-failover
section's dropped connection.  The cluster listens on no TCP address
(test/lib/cluster.sh); this relay listens on 127.0.0.1 on a free port,
prints the port on stdout, and copies bytes both ways, one connection per
client connection: a backend that ends closes its client's socket, as a
direct connection would.

SIGUSR1 drops every connection open at that moment the way a half-open one
is dropped: the server's side is closed (its backend sees the session end)
while the client's side stays open and silent (what the client sends is
read and thrown away, nothing comes back, so its calls hang); and until
SIGUSR2 every new connection is closed at once (the server is unreachable).

    tcp_relay.py UNIX_SOCKET_PATH
"""
import asyncio
import signal
import sys


async def pipe(reader, writer, conn):
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
        if not conn["dropped"]:
            writer.close()


async def swallow(reader, writer):
    """A dropped connection's client side: read until the client closes it, answer nothing."""
    try:
        while await reader.read(65536):
            pass
    except (ConnectionError, OSError):
        pass
    writer.close()


async def serve(path):
    conns = {}      # id -> one relayed connection: its pipes, its server writer, its client streams
    cut_off = [False]

    def drop_all():
        cut_off[0] = True
        for conn in conns.values():
            conn["dropped"] = True
            for task in conn["pipes"]:
                task.cancel()
            conn["server"].close()
            conn["swallow"] = asyncio.ensure_future(swallow(conn["reader"], conn["writer"]))
        conns.clear()

    async def relay(client_reader, client_writer):
        if cut_off[0]:
            client_writer.close()
            return
        try:
            server_reader, server_writer = await asyncio.open_unix_connection(path)
        except OSError:
            client_writer.close()
            return
        conn = {"dropped": False, "server": server_writer, "reader": client_reader, "writer": client_writer}
        conn["pipes"] = [asyncio.ensure_future(pipe(client_reader, server_writer, conn)),
                         asyncio.ensure_future(pipe(server_reader, client_writer, conn))]
        conns[id(conn)] = conn
        await asyncio.gather(*conn["pipes"], return_exceptions=True)
        conns.pop(id(conn), None)
        if conn["dropped"]:
            await conn["swallow"]

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, drop_all)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, lambda: cut_off.__setitem__(0, False))
    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(serve(sys.argv[1]))
