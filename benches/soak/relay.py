"""A TCP relay in front of the NLP service that can hold its answers: the soak's "slow service"
fault, on the real service. Runs an asyncio loop in a thread of the soak's process."""

from __future__ import annotations

import asyncio
import threading


class Relay:
    """Listens on 127.0.0.1 (`port`), forwards each connection to 127.0.0.1:`upstream`; answers
    are held `delay_s` before they go back (0: passed at once). A connection the upstream
    refuses is closed, as a dead service's would be."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.delay_s = 0.0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, hold: bool) -> None:
            try:
                while data := await src.read(65536):
                    if hold and self.delay_s:
                        await asyncio.sleep(self.delay_s)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))

    def close(self) -> None:
        def stop() -> None:
            self.server.close()
            self.loop.stop()
        self.loop.call_soon_threadsafe(stop)
        self.thread.join(10)
