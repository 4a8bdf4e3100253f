// What the demo page needs from the AI SDK: the chat core and its HTTP transport.
export { AbstractChat, DefaultChatTransport } from "ai";
