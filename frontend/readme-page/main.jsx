// The README's React example, as a reader copies it into a Vite app: bin/_frontend.sh writes the
// README's ```jsx block to ./Chat.jsx (not committed), and this page mounts it under StrictMode.
import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { Chat } from "./Chat.jsx";

const params = new URLSearchParams(location.search);
const sessionId = params.get("session") ?? crypto.randomUUID();
if (!params.get("session")) history.replaceState(null, "", `${location.pathname}?${new URLSearchParams({ ...Object.fromEntries(params), session: sessionId })}`);

createRoot(document.getElementById("root")).render(<StrictMode><Chat sessionId={sessionId} /></StrictMode>);
