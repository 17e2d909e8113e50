# A TCP proxy that delays each request by DELAY_MS: client bytes arriving after the server
# last spoke on that connection (a new HTTP request on a kept-alive connection, or the first)
# wait DELAY_MS before they are passed on; everything else passes at once. In front of
# moto_server it makes every request a round trip of at least DELAY_MS, as on a Garage
# cluster (40-60 ms a small object), so that a request trace's sequential rounds
# (scripts/s3-trace-rounds.py) follow the requests' dependencies, not moto's speed: two
# requests issued together overlap, and one issued after another returned never does.
# Usage: python3 scripts/latency-proxy.py LISTEN_PORT TARGET_PORT DELAY_MS
import asyncio, sys

listen, target, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000


async def serve(cr, cw):
    try:
        sr, sw = await asyncio.open_connection("127.0.0.1", target)
    except OSError:
        cw.close()
        return
    state = {"server_spoke": True}

    async def up():
        while data := await cr.read(1 << 16):
            if state["server_spoke"]:
                state["server_spoke"] = False
                await asyncio.sleep(delay)
            sw.write(data)
            await sw.drain()
        sw.close()

    async def down():
        while data := await sr.read(1 << 16):
            state["server_spoke"] = True
            cw.write(data)
            await cw.drain()
        cw.close()

    await asyncio.gather(up(), down(), return_exceptions=True)


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


asyncio.run(main())
