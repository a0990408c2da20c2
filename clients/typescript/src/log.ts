// Where the worker says what it does. Pass your own Logger (pino, winston and
// console all fit) to see more than warnings and errors.

export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** Warnings and errors to stderr, prefixed "weft-worker:"; debug and info dropped. */
export const defaultLogger: Logger = {
  debug() {},
  info() {},
  warn: (message) => console.error(`weft-worker: ${message}`),
  error: (message) => console.error(`weft-worker: ${message}`),
};
