"""Reports people can read: HTML pages (index, replay report, leaderboard) and figures.

- ``view``: pure functions turning a report document into what a page shows.
- ``figures``: matplotlib figures (Agg / SVG backends) rendered from a stored report.
- ``service``: loading replays, parsed reports and datasets for the pages.
- ``router``: ``/v1/replays/{id}/figures/{name}.{svg,png}`` (API, in the OpenAPI document).
- ``pages``: the server-rendered HTML pages and their form handlers (not in the API document).
"""
