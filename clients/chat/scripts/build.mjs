// Build dist/: the framework-free helpers are the file Django serves (chat/static/helix/helix-chat.js),
// copied in as src/index.js so that one source serves both; TypeScript emits the hooks and the
// declarations of both entries (the helpers' from their JSDoc).
import { execFileSync } from "node:child_process";
import { copyFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
copyFileSync(join(root, "../../chat/static/helix/helix-chat.js"), join(root, "src/index.js"));
rmSync(join(root, "dist"), { recursive: true, force: true });
execFileSync(process.execPath, [join(root, "node_modules/typescript/bin/tsc"), "-p", root], { stdio: "inherit" });
