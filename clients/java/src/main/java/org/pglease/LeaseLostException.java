package org.pglease;

/** The server refused a fenced checkpoint (or a close): another worker, or a newer epoch, holds the lease. */
public final class LeaseLostException extends Exception {
    private static final long serialVersionUID = 1L;

    public LeaseLostException(String message) {
        super(message);
    }
}
