"""The web dashboard (``agentos dashboard``): a Starlette application serving the CLI's
documents as JSON (:mod:`agentos.cli.views`), the event stream as server-sent events, and
one static page that shows them (:mod:`agentos.cli._web.app`)."""
