"""`modeldeck status`: the service, where its endpoint listens, where its key comes from, TLS, and the engines."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.cli.invocation import Invocation
from app.cli.service_link import running_service


def add_status_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = commands.add_parser(
        "status", help="the service, its endpoint, the API key's source, TLS and the engines that are running"
    )
    status.add_argument("--json", action="store_true", help="print it as JSON")
    status.set_defaults(func=run_status)


def run_status(args: argparse.Namespace, invocation: Invocation) -> int:
    paths = invocation.paths
    client = running_service(paths)
    try:
        health = client.health()
        info = client.endpoint()
        models = client.models()
    finally:
        client.close()
    engines = [
        {"id": m["id"], "state": m["state"], "engine": m.get("engine"), "pid": m.get("pid"), "port": m.get("port")}
        for m in models
        if m["state"] != "stopped"
    ]
    report = {
        "service": {
            "pid": client.address.pid,
            "version": health.get("version"),
            "control_url": client.address.control_url,
        },
        "endpoint": info["url"],
        "api_key": {"required": info.get("api_key") is not None, "source": info.get("key_source")},
        "tls": info.get("tls"),
        "engines": engines,
    }
    print(json.dumps(report, indent=2) if args.json else "\n".join(status_lines(report)))
    return 0


def status_lines(report: dict[str, Any]) -> list[str]:
    service, key = report["service"], report["api_key"]
    lines = [
        f"Service      running, pid {service['pid']}, version {service['version']}",
        f"Control API  {service['control_url']}",
        f"Endpoint     {report['endpoint']}",
        f"API key      {'required' if key['required'] else 'none'} (from: {key['source']})",
    ]
    tls = report["tls"]
    if not tls:
        lines.append("TLS          off: plain HTTP")
    else:
        made_by = "self-signed by ModelDeck" if tls["self_signed"] else "your certificate"
        lines += [
            f"TLS          {made_by}: {tls['cert_path']}",
            f"Fingerprint  SHA-256 {tls['fingerprint_sha256']}",
            f"Trust it     curl --cacert {tls['cert_path']}, or Python's ssl.create_default_context(cafile=...)",
        ]
    if not report["engines"]:
        lines.append("Engines      none running")
    for index, engine in enumerate(report["engines"]):
        where = f"pid {engine['pid']}, port {engine['port']}" if engine["pid"] else "no process"
        label = "Engines" if index == 0 else ""
        lines.append(f"{label:12} {engine['id']}: {engine['state']} ({engine['engine']}, {where})")
    return lines
