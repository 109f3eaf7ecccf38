"""The agent side of the network-namespace test: started by ``unshare -n`` (a namespace with nothing but
its own loopback), it makes the gateway's listener there, hands the socket to the harness over a unix
socket, then behaves like an agent: calls the model API through the gateway, tries the provider
directly, tries a data host through the proxy, and prints what happened as JSON.

Usage: ``python3 netns_agent.py FD PROVIDER_PORT`` (FD: the unix socket to the harness)."""

import array
import json
import socket
import sys
import urllib.error
import urllib.request


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))
    provider_port = int(sys.argv[2])
    listener = socket.create_server(("127.0.0.1", 8484))
    channel.sendmsg([b"L"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [listener.fileno()]))])
    env = json.loads(channel.recv(65536).decode())  # the run's variables, once the harness serves the socket
    out = {}
    request = urllib.request.Request(env["OPENAI_BASE_URL"] + "/chat/completions", method="POST",
                                     data=json.dumps({"model": "gpt-4o-mini", "messages": []}).encode(),
                                     headers={"Authorization": "Bearer " + env["OPENAI_API_KEY"],
                                              "Content-Type": "application/json"})
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(request, timeout=10) as resp:
        out["model_call"] = json.loads(resp.read())["choices"][0]["message"]["content"]
    try:
        socket.create_connection(("127.0.0.1", provider_port), timeout=3).close()
        out["provider_direct"] = "connected"
    except OSError as exc:
        out["provider_direct"] = type(exc).__name__
    proxied = urllib.request.build_opener(urllib.request.ProxyHandler({"http": env["HTTP_PROXY"]}))
    try:
        proxied.open("http://zenodo.org/records/15692630/files/TopCoW2024_Data_Release.zip", timeout=10)
        out["zenodo"] = "downloaded"
    except urllib.error.HTTPError as exc:
        out["zenodo"] = exc.code
    print(json.dumps(out), flush=True)


main()
