// RAII owners of a SQLite connection, its prepared statements and its
// transactions, with every failure an Error (code "store") carrying
// sqlite3_errmsg. Nothing here knows sbxd's schema (store.hpp does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace sbx::sqlite {

class Statement {
public:
    Statement() = default;

    // Binds by 1-based index; empty optionals bind NULL.
    Statement& bind(int index, std::int64_t value);
    Statement& bind(int index, std::string_view text);
    Statement& bind(int index, const std::string& text) { return bind(index, std::string_view(text)); }
    Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
    Statement& bind(int index, std::nullptr_t);
    Statement& bind(int index, const std::optional<std::int64_t>& value);
    Statement& bind(int index, const std::optional<std::string>& text);
    template <typename... Args>
    Statement& bind_all(const Args&... args) {
        int index = 1;
        (bind(index++, args), ...);
        return *this;
    }

    // One step: true with a row to read, false when done.
    [[nodiscard]] Result<bool> step();
    // Steps to completion (for statements that return no rows).
    [[nodiscard]] Result<void> run();
    // Steps through every row, calling fn(*this) on each; fn returns
    // Result<void>, and its first error ends the walk.
    template <typename Fn>
    [[nodiscard]] Result<void> for_each_row(Fn&& fn);
    void reset();

    [[nodiscard]] bool is_null(int column) const;
    [[nodiscard]] std::int64_t int64(int column) const;
    [[nodiscard]] std::string text(int column) const;
    [[nodiscard]] std::optional<std::int64_t> optional_int64(int column) const;
    [[nodiscard]] std::optional<std::string> optional_text(int column) const;

private:
    friend class Database;
    struct Finalize {
        void operator()(sqlite3_stmt* stmt) const;
    };
    Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
    sqlite3* db_ = nullptr;
    std::unique_ptr<sqlite3_stmt, Finalize> stmt_;
    std::optional<Error> bind_error_;
};

class Database {
public:
    // Opens (creating) the file at path; WAL journal, foreign keys on,
    // busy timeout so that another process (`sbxd keys create` beside the
    // daemon) waits for the write lock instead of failing.
    [[nodiscard]] static Result<Database> open(const std::string& path);

    [[nodiscard]] Result<void> exec(const std::string& sql);
    [[nodiscard]] Result<Statement> prepare(std::string_view sql);
    [[nodiscard]] std::int64_t changes() const;
    [[nodiscard]] sqlite3* handle() const { return db_.get(); }

private:
    struct Close {
        void operator()(sqlite3* db) const;
    };
    std::unique_ptr<sqlite3, Close> db_;
};

// The code of an error from a statement that broke a UNIQUE or PRIMARY
// KEY constraint (SQLITE_CONSTRAINT_UNIQUE/_PRIMARYKEY); others are "store".
inline constexpr std::string_view kUniqueViolation = "unique_violation";
[[nodiscard]] bool is_unique_violation(const Error& error);
// The code of an error from a write that found its file system full (SQLITE_FULL).
inline constexpr std::string_view kStoreFull = "store_full";

// BEGIN IMMEDIATE (the write lock taken at once, so two writers never
// deadlock upgrading a read); rolled back when destroyed uncommitted.
class Transaction {
public:
    [[nodiscard]] static Result<Transaction> begin(Database& db);
    Transaction(Transaction&& other) noexcept;
    Transaction& operator=(Transaction&&) = delete;
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    ~Transaction();

    [[nodiscard]] Result<void> commit();

private:
    explicit Transaction(Database* db) : db_(db) {}
    Database* db_;
};

[[nodiscard]] Error store_error(sqlite3* db, std::string_view what);

template <typename Fn>
Result<void> Statement::for_each_row(Fn&& fn) {
    for (;;) {
        auto row = step();
        if (!row) {
            return row.error();
        }
        if (!*row) {
            return ok();
        }
        if (auto r = fn(*this); !r) {
            return r;
        }
    }
}

}  // namespace sbx::sqlite
