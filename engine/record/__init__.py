"""Recording, below both doors (the lab's bench and the server): the one row builder (`rows`), the one write
policy with its retries and spills (`writer`), the server's spill files and their replay (`spills`), and the
engine core's subscriber that queues each finished request for the server's recorder thread (`writer.Ended`).
Imports nothing from bench, serve, engines, cli or app."""
