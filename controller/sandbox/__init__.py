"""Where tool calls run: the Sandbox protocol and the toolbox channel, and the Docker backend with what it starts
(OCI runtimes in ``isolation``, images, the network and its egress proxy, the labels that own containers)."""
