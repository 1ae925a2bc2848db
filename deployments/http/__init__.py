"""The API edge every replica serves (in the replica's process, in front of its server): the raw-body
guard, request schemas and checks, one table of refusals and error bodies, structured-output checks,
request limits, the OpenAI handlers, the control routes and the HTTP metrics.

Nothing here holds an engine: `deployments.replica` binds these pieces to the replica's server.
"""
