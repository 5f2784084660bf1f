"""What crosses the wire: the API's models, the events, the toolbox protocol and the public value types (limits,
policies, changes, the session record). Client-safe: nothing here imports Docker, FastAPI or the controller."""
