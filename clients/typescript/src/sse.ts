// A reader of Server-Sent Events (text/event-stream), as the HTML standard
// parses them: lines ending in \n, \r\n or \r; "field: value" lines; a blank
// line dispatches the event; lines starting with ":" are comments.

export interface ServerSentEvent {
  /** The last id: field seen (it carries over to later events, per the standard). */
  id: string;
  /** The event: field, "message" when absent. */
  event: string;
  /** The data: lines, joined with "\n". */
  data: string;
}

/** The events of a stream of bytes, as they are complete. */
export async function* readEvents(body: AsyncIterable<Uint8Array>): AsyncGenerator<ServerSentEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  let id = "";
  let event = "";
  let data: string[] = [];
  let first = true;
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    if (first && buffer.length > 0) {
      buffer = buffer.replace(/^\uFEFF/, "");
      first = false;
    }
    for (;;) {
      const end = buffer.search(/\r\n|\r|\n/);
      // A lone \r at the end of the buffer may be the start of \r\n: wait for more.
      if (end < 0 || (end === buffer.length - 1 && buffer[end] === "\r")) break;
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
      if (line === "") {
        if (data.length > 0) yield { id, event: event || "message", data: data.join("\n") };
        event = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") data.push(value);
      else if (field === "event") event = value;
      else if (field === "id" && !value.includes("\0")) id = value;
      // retry: the client reconnects on its own schedule; other fields are ignored.
    }
  }
}
