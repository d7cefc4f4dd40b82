"""An MCP server that does everything the official conformance suite asks of a server.

Written from the "Server Implementation Requirements" of `@modelcontextprotocol/conformance` 0.2.0-alpha.12's
server scenarios (`npx conformance list`; each scenario's description names the tools, resources, prompts
and behaviour it expects), on the MCP SDK's low-level `Server`, which serves both protocol eras on one
endpoint. It is the upstream the conformance tests put behind the gateway and the proxy
(tests/conformance): whatever it passes directly must pass through them too.

Run: `python everything.py PORT` (streamable HTTP on 127.0.0.1:PORT/mcp).
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as mt
import uvicorn
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError

NAME = "mcpcache-everything"
PNG_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
"""A 1x1 PNG."""
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
"""A WAV file of one silent sample."""
RETRY_MS = 100
"""The SSE `retry` the server primes its streams with (the suite's polling scenario waits for the client)."""

Context = ServerRequestContext[Any]

SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def _object(properties: Mapping[str, Any] | None = None, required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties or {})}
    if required:
        schema["required"] = required
    return schema


def _form(message: str, properties: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    return {"message": message, "requestedSchema": _object(properties, required)}


def _elicit(message: str, properties: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    return {"method": "elicitation/create", "params": _form(message, properties, required)}


def _sample(text: str, max_tokens: int) -> dict[str, Any]:
    message = {"role": "user", "content": {"type": "text", "text": text}}
    return {"method": "sampling/createMessage", "params": {"messages": [message], "maxTokens": max_tokens}}


NAME_FORM = _elicit("What is your name?", {"name": {"type": "string"}}, ["name"])
ROOTS = {"method": "roots/list", "params": {}}

SEP1034_FORM = _form(
    "Please review and update the form fields with defaults",
    {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    [],
)

SEP1330_FORM = _form(
    "Please select options",
    {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
    [],
)


def _tool(name: str, description: str, schema: dict[str, Any] | None = None) -> mt.Tool:
    return mt.Tool(name=name, description=description, input_schema=schema or _object())


TOOLS = [
    _tool("test_simple_text", "Returns one text block"),
    _tool("test_image_content", "Returns one image block"),
    _tool("test_audio_content", "Returns one audio block"),
    _tool("test_embedded_resource", "Returns one embedded resource"),
    _tool("test_multiple_content_types", "Returns text, an image and an embedded resource"),
    _tool("test_tool_with_logging", "Logs three messages while it runs"),
    _tool("test_logging_tool", "Logs one message"),
    _tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100"),
    _tool("test_error_handling", "Always fails"),
    _tool("test_reconnection", "Closes its SSE stream mid-call, then answers"),
    _tool("test_sampling", "Asks the client's model", _object({"prompt": {"type": "string"}}, ["prompt"])),
    _tool("test_elicitation", "Asks the user", _object({"message": {"type": "string"}}, ["message"])),
    _tool("test_elicitation_sep1034_defaults", "Asks the user, with defaults"),
    _tool("test_elicitation_sep1330_enums", "Asks the user to pick from enums"),
    _tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", SCHEMA_2020_12),
    _tool("test_input_required_result_elicitation", "Asks the user's name, then greets"),
    _tool("test_input_required_result_sampling", "Asks the client's model, then answers"),
    _tool("test_input_required_result_list_roots", "Asks for the client's roots, then lists them"),
    _tool("test_input_required_result_request_state", "Asks for a confirmation, with request state"),
    _tool("test_input_required_result_multiple_inputs", "Asks three things at once"),
    _tool("test_input_required_result_multi_round", "Asks two things, one round each"),
    _tool("test_input_required_result_tampered_state", "Asks for a confirmation, with sealed state"),
    _tool("test_input_required_result_capabilities", "Asks only what the client declared"),
    _tool("test_streaming_elicitation", "Asks the user (as an input-required result)"),
    _tool("test_missing_capability", "Needs the client's sampling capability"),
    _tool("test_trigger_tool_change", "Changes the tool list"),
    _tool("test_trigger_prompt_change", "Changes the prompt list"),
    _tool("test_touch_watched", "Tells the subscribers of test://watched-resource that it changed"),
]


class MemoryEventStore(EventStore):
    """Every event of every stream, kept for replay (SSE resumption: `Last-Event-ID`)."""

    def __init__(self) -> None:
        self._events: list[tuple[str, str, mt.JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: mt.JSONRPCMessage | None) -> str:
        event_id = str(len(self._events) + 1)
        self._events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream = next((sid for sid, eid, _ in self._events if eid == last_event_id), None)
        if stream is None:
            return None
        after = int(last_event_id)
        for sid, eid, message in self._events:
            if sid == stream and int(eid) > after and message is not None:
                await send_callback(EventMessage(message, eid))
        return stream


@dataclass
class State:
    subscriptions: dict[str, dict[int, Any]] = field(default_factory=dict)
    """URI -> the sessions subscribed to it, by their connection (one per client connection)."""
    bus: InMemorySubscriptionBus = field(default_factory=InMemorySubscriptionBus)


def _text(text: str, *, is_error: bool = False) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)], is_error=is_error)


def _asked(requests: Mapping[str, Any], state: str | None = None) -> mt.InputRequiredResult:
    return mt.InputRequiredResult.model_validate({"inputRequests": dict(requests), "requestState": state})


def _answers(params: mt.CallToolRequestParams | mt.GetPromptRequestParams) -> dict[str, Any]:
    responses = params.input_responses or {}
    return {key: value.model_dump(by_alias=True, exclude_none=True) for key, value in responses.items()}


def _content(answer: Any) -> dict[str, Any]:
    content = answer.get("content") if isinstance(answer, dict) else None
    return content if isinstance(content, dict) else {}


def _capabilities(ctx: Context) -> mt.ClientCapabilities | None:
    return ctx.session.client_capabilities


async def _log(ctx: Context, text: str) -> None:
    await ctx.session.send_log_message(level="info", data=text, logger=NAME, related_request_id=ctx.request_id)


async def _plain_tool(ctx: Context, name: str, arguments: Mapping[str, Any]) -> mt.CallToolResult | None:
    """The tools of the handshake era's scenarios (content, logging, progress, requests to the client)."""
    session = ctx.session
    match name:
        case "test_simple_text":
            return _text("This is a simple text response for testing.")
        case "test_image_content":
            return mt.CallToolResult(content=[mt.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")])
        case "test_audio_content":
            return mt.CallToolResult(content=[mt.AudioContent(type="audio", data=WAV_BASE64, mime_type="audio/wav")])
        case "test_embedded_resource":
            resource = mt.TextResourceContents(
                uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
            )
            return mt.CallToolResult(content=[mt.EmbeddedResource(type="resource", resource=resource)])
        case "test_multiple_content_types":
            resource = mt.TextResourceContents(
                uri="test://mixed-content-resource",
                mime_type="application/json",
                text=json.dumps({"test": "data", "value": 123}),
            )
            return mt.CallToolResult(
                content=[
                    mt.TextContent(type="text", text="Multiple content types test:"),
                    mt.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png"),
                    mt.EmbeddedResource(type="resource", resource=resource),
                ]
            )
        case "test_tool_with_logging":
            for step, text in enumerate(("Tool execution started", "Tool processing data", "Tool execution completed")):
                if step:
                    await anyio.sleep(0.05)
                await _log(ctx, text)
            return _text("Tool with logging executed successfully")
        case "test_logging_tool":
            await _log(ctx, "test_logging_tool ran")
            return _text("logged")
        case "test_tool_with_progress":
            token = ctx.meta.get("progress_token") if ctx.meta is not None else None
            for step, progress in enumerate((0.0, 50.0, 100.0)):
                if step:
                    await anyio.sleep(0.05)
                if token is not None:
                    await session.send_progress_notification(
                        token, progress, 100.0, f"Completed step {progress:g} of 100", related_request_id=ctx.request_id
                    )
            return _text(str(token if token is not None else 0))
        case "test_error_handling":
            return _text("This tool intentionally returns an error for testing", is_error=True)
        case "test_reconnection":
            await _log(ctx, "Before disconnect")
            if ctx.close_sse_stream is not None:
                await ctx.close_sse_stream()
            await anyio.sleep(0.2)
            await _log(ctx, "After reconnect")
            return _text("Reconnection test completed")
        case "test_sampling":
            try:
                sampled = await session.create_message(
                    [
                        mt.SamplingMessage(
                            role="user", content=mt.TextContent(type="text", text=str(arguments.get("prompt", "")))
                        )
                    ],
                    max_tokens=100,
                    related_request_id=ctx.request_id,
                )
            except MCPError as exc:
                return _text(f"Sampling not supported or error: {exc}", is_error=True)
            text = sampled.content.text if isinstance(sampled.content, mt.TextContent) else "No response"
            return _text(f"LLM response: {text}")
        case "test_elicitation" | "test_elicitation_sep1034_defaults" | "test_elicitation_sep1330_enums":
            if name == "test_elicitation":
                form = _form(
                    str(arguments.get("message", "")),
                    {
                        "username": {"type": "string", "description": "User's response"},
                        "email": {"type": "string", "description": "User's email address"},
                    },
                    ["username", "email"],
                )
            else:
                form = SEP1034_FORM if name.endswith("defaults") else SEP1330_FORM
            schema = mt.ElicitRequestFormParams.model_validate(form).requested_schema
            try:
                answer = await session.elicit_form(form["message"], schema, related_request_id=ctx.request_id)
            except MCPError as exc:
                return _text(f"Elicitation not supported or error: {exc}", is_error=True)
            label = "User response" if name == "test_elicitation" else "Elicitation completed"
            return _text(f"{label}: action={answer.action}, content={json.dumps(answer.content or {})}")
    return None


async def _asking_tool(
    ctx: Context, state: State, params: mt.CallToolRequestParams
) -> mt.CallToolResult | mt.InputRequiredResult | None:
    """The tools of the 2026-07-28 scenarios: input-required results, discovery diagnostics, list changes."""
    answers = _answers(params)
    sent_state = params.request_state
    match params.name:
        case "test_input_required_result_elicitation" | "test_streaming_elicitation":
            if "user_name" not in answers:
                return _asked({"user_name": NAME_FORM})
            return _text(f"Hello, {_content(answers['user_name']).get('name', 'stranger')}!")
        case "test_input_required_result_sampling":
            if "capital_question" not in answers:
                return _asked({"capital_question": _sample("What is the capital of France?", 100)})
            sampled = answers["capital_question"].get("content", {})
            return _text(f"Sampled: {sampled.get('text', '') if isinstance(sampled, dict) else ''}")
        case "test_input_required_result_list_roots":
            if "client_roots" not in answers:
                return _asked({"client_roots": ROOTS})
            roots = answers["client_roots"].get("roots", [])
            return _text("Roots: " + ", ".join(str(root.get("uri")) for root in roots if isinstance(root, dict)))
        case "test_input_required_result_request_state" | "test_input_required_result_tampered_state":
            confirm = _elicit("Please confirm", {"ok": {"type": "boolean"}}, ["ok"])
            if "confirm" not in answers or sent_state != "round-1":
                return _asked({"confirm": confirm}, "round-1")
            return _text("state-ok: confirmed")
        case "test_input_required_result_multiple_inputs":
            wanted = {"user_name": NAME_FORM, "greeting": _sample("Generate a greeting", 50), "client_roots": ROOTS}
            if not all(key in answers for key in wanted) or sent_state != "all-three":
                return _asked(wanted, "all-three")
            return _text("Got all three answers")
        case "test_input_required_result_multi_round":
            if sent_state == "round-2" and "step2" in answers:
                return _text(f"Favourite colour: {_content(answers['step2']).get('color', '?')}")
            if sent_state == "round-1" and "step1" in answers:
                step2 = _elicit("Step 2: What is your favorite color?", {"color": {"type": "string"}}, ["color"])
                return _asked({"step2": step2}, "round-2")
            step1 = _elicit("Step 1: What is your name?", {"name": {"type": "string"}}, ["name"])
            return _asked({"step1": step1}, "round-1")
        case "test_input_required_result_capabilities":
            declared = _capabilities(ctx)
            wanted = {}
            if declared is not None and declared.sampling is not None:
                wanted["question"] = _sample("Say hello", 20)
            if declared is not None and declared.elicitation is not None:
                wanted["user_name"] = NAME_FORM
            if wanted and not all(key in answers for key in wanted):
                return _asked(wanted)
            return _text("Asked only what the client declared")
        case "test_missing_capability":
            declared = _capabilities(ctx)
            if declared is None or declared.sampling is None:
                raise MCPError(
                    code=mt.MISSING_REQUIRED_CLIENT_CAPABILITY,
                    message="Client did not declare the sampling capability this tool needs",
                    data={"requiredCapabilities": {"sampling": {}}},
                )
            return _text("sampling declared")
        case "test_touch_watched":  # not the suite's: tells subscribers test://watched-resource changed
            for subscriber in list(state.subscriptions.get("test://watched-resource", {}).values()):
                await subscriber.send_resource_updated("test://watched-resource")
            await state.bus.publish(ResourceUpdated("test://watched-resource"))  # 2026-07-28 listeners
            return _text("touched")
        case "test_trigger_tool_change":
            await state.bus.publish(ToolsListChanged())
            await ctx.session.send_tool_list_changed()
            return _text("tool list changed")
        case "test_trigger_prompt_change":
            await state.bus.publish(PromptsListChanged())
            await ctx.session.send_prompt_list_changed()
            return _text("prompt list changed")
    return None


RESOURCES = [
    mt.Resource(uri="test://static-text", name="static-text", description="A text resource", mime_type="text/plain"),
    mt.Resource(uri="test://static-binary", name="static-binary", description="A PNG", mime_type="image/png"),
    mt.Resource(
        uri="test://watched-resource", name="watched-resource", description="Subscribe to it", mime_type="text/plain"
    ),
]
TEMPLATE = mt.ResourceTemplate(
    uri_template="test://template/{id}/data",
    name="template-data",
    description="Data for an id",
    mime_type="application/json",
)


def _read(uri: str) -> mt.ReadResourceResult:
    match uri:
        case "test://static-text":
            text = "This is the content of the static text resource."
            return mt.ReadResourceResult(contents=[mt.TextResourceContents(uri=uri, mime_type="text/plain", text=text)])
        case "test://static-binary":
            blob = mt.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG_BASE64)
            return mt.ReadResourceResult(contents=[blob])
        case "test://watched-resource":
            text = "Watched resource content"
            return mt.ReadResourceResult(contents=[mt.TextResourceContents(uri=uri, mime_type="text/plain", text=text)])
    if uri.startswith("test://template/") and uri.endswith("/data"):
        ident = uri.removeprefix("test://template/").removesuffix("/data")
        text = json.dumps({"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"})
        return mt.ReadResourceResult(
            contents=[mt.TextResourceContents(uri=uri, mime_type="application/json", text=text)]
        )
    raise MCPError(code=mt.INVALID_PARAMS, message="Resource not found", data={"uri": uri})


def _argument(name: str, description: str) -> mt.PromptArgument:
    return mt.PromptArgument(name=name, description=description, required=True)


PROMPTS = [
    mt.Prompt(name="test_simple_prompt", description="A prompt without arguments"),
    mt.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two arguments",
        arguments=[_argument("arg1", "First test argument"), _argument("arg2", "Second test argument")],
    ),
    mt.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt that embeds a resource",
        arguments=[_argument("resourceUri", "URI of the resource to embed")],
    ),
    mt.Prompt(name="test_prompt_with_image", description="A prompt with an image"),
    mt.Prompt(name="test_input_required_result_prompt", description="A prompt that asks for context first"),
]


def _user(content: Any) -> mt.PromptMessage:
    return mt.PromptMessage(role="user", content=content)


def _prompt(params: mt.GetPromptRequestParams) -> mt.GetPromptResult | mt.InputRequiredResult:
    arguments = params.arguments or {}
    match params.name:
        case "test_simple_prompt":
            messages = [_user(mt.TextContent(type="text", text="This is a simple prompt for testing."))]
        case "test_prompt_with_arguments":
            text = f"Prompt with arguments: arg1='{arguments.get('arg1')}', arg2='{arguments.get('arg2')}'"
            messages = [_user(mt.TextContent(type="text", text=text))]
        case "test_prompt_with_embedded_resource":
            resource = mt.TextResourceContents(
                uri=arguments.get("resourceUri", "test://example-resource"),
                mime_type="text/plain",
                text="Embedded resource content for testing.",
            )
            messages = [
                _user(mt.EmbeddedResource(type="resource", resource=resource)),
                _user(mt.TextContent(type="text", text="Please process the embedded resource above.")),
            ]
        case "test_prompt_with_image":
            messages = [
                _user(mt.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")),
                _user(mt.TextContent(type="text", text="Please analyze the image above.")),
            ]
        case "test_input_required_result_prompt":
            answers = _answers(params)
            if "user_context" not in answers:
                ask = _elicit("What context should the prompt use?", {"context": {"type": "string"}}, ["context"])
                return _asked({"user_context": ask})
            context = _content(answers["user_context"]).get("context", "")
            messages = [_user(mt.TextContent(type="text", text=f"Use this context: {context}"))]
        case _:
            raise MCPError(code=mt.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
    return mt.GetPromptResult(messages=messages)


def build(state: State | None = None) -> Server[Any]:
    """The everything server (its handlers close over `state`)."""
    state = state or State()

    async def list_tools(ctx: Context, params: mt.PaginatedRequestParams | None) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Context, params: mt.CallToolRequestParams) -> mt.CallToolResult | mt.InputRequiredResult:
        arguments = params.arguments or {}
        result = await _plain_tool(ctx, params.name, arguments)
        if result is None:
            result = await _asking_tool(ctx, state, params)
        if result is None:
            raise MCPError(code=mt.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        return result

    async def list_resources(ctx: Context, params: mt.PaginatedRequestParams | None) -> mt.ListResourcesResult:
        return mt.ListResourcesResult(resources=RESOURCES)

    async def list_templates(ctx: Context, params: mt.PaginatedRequestParams | None) -> mt.ListResourceTemplatesResult:
        return mt.ListResourceTemplatesResult(resource_templates=[TEMPLATE])

    async def read_resource(ctx: Context, params: mt.ReadResourceRequestParams) -> mt.ReadResourceResult:
        return _read(str(params.uri))

    async def subscribe(ctx: Context, params: mt.SubscribeRequestParams) -> mt.EmptyResult:
        state.subscriptions.setdefault(str(params.uri), {})[id(ctx.session._connection)] = ctx.session
        return mt.EmptyResult()

    async def unsubscribe(ctx: Context, params: mt.UnsubscribeRequestParams) -> mt.EmptyResult:
        state.subscriptions.get(str(params.uri), {}).pop(id(ctx.session._connection), None)
        return mt.EmptyResult()

    async def list_prompts(ctx: Context, params: mt.PaginatedRequestParams | None) -> mt.ListPromptsResult:
        return mt.ListPromptsResult(prompts=PROMPTS)

    async def get_prompt(
        ctx: Context, params: mt.GetPromptRequestParams
    ) -> mt.GetPromptResult | mt.InputRequiredResult:
        return _prompt(params)

    async def complete(ctx: Context, params: mt.CompleteRequestParams) -> mt.CompleteResult:
        # The suite takes any answer; this one shows where it came from (tests/gateway/test_passthrough.py).
        values = [f"{params.argument.value}-from-{NAME}"]
        return mt.CompleteResult(completion=mt.Completion(values=values, total=1, has_more=False))

    async def set_level(ctx: Context, params: mt.SetLevelRequestParams) -> mt.EmptyResult:
        return mt.EmptyResult()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the logging capability is deprecated on 2026-07-28, still a 2025 scenario
        server: Server[Any] = Server(
            NAME,
            version="1.0.0",
            cache_hints={
                method: CacheHint(ttl_ms=60_000, scope="public")
                for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list")
            }
            | {"resources/read": CacheHint(ttl_ms=0, scope="private")},
            on_list_tools=list_tools,
            on_call_tool=call_tool,  # type: ignore[arg-type]
            on_list_resources=list_resources,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
            on_subscribe_resource=subscribe,
            on_unsubscribe_resource=unsubscribe,
            on_subscriptions_listen=ListenHandler(state.bus),
            on_list_prompts=list_prompts,
            on_get_prompt=get_prompt,  # type: ignore[arg-type]
            on_completion=complete,
            on_set_logging_level=set_level,
        )
    server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=NAME))
    return server


def app(server: Server[Any] | None = None) -> Any:
    """The ASGI app: streamable HTTP at /mcp with an event store (resumable streams, primed with `retry`)."""
    server = server or build()
    return server.streamable_http_app(event_store=MemoryEventStore(), retry_interval=RETRY_MS, host="127.0.0.1")


def main(argv: list[str]) -> None:
    port = int(argv[0])
    uvicorn.run(app(), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])


__all__ = ["PNG_BASE64", "TOOLS", "MemoryEventStore", "State", "app", "build"]
