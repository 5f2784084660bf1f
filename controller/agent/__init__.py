"""The agent: the tool-use loop (``loop``), its tools, the model seam and the Anthropic client behind it, and the
context it keeps (``context``, ``conversation``, ``compactor``). It reaches the repository only through a Sandbox."""
